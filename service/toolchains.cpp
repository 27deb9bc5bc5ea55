// `kforge toolchains [--server URL]`: the compilers this host has, or a server's.
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "core/toolchain/toolchain.hpp"
#include "service/client.hpp"
#include "service/commands.hpp"

namespace kforge::cli {
namespace {

int toolchains(const ClientOptions& o) {
  if (o.server.empty()) {
    std::cout << core::Toolchains::discover().to_json().dump(2) << "\n";
    return kExitOk;
  }
  auto cli = client_for(o, "toolchains");
  if (!cli) return kExitUsage;
  auto res = cli->Get("/toolchains");
  if (!res) {
    print_unreachable("toolchains", o, res.error());
    return kExitUnreachable;
  }
  if (res->status != 200) {
    print_failure("toolchains", res->status, nlohmann::json::parse(res->body, nullptr, false), res->body);
    return kExitFailed;
  }
  std::cout << res->body;
  return kExitOk;
}

}  // namespace

Run declare_toolchains(CLI::App& command) {
  auto o = std::make_shared<ClientOptions>();
  command.footer("Without --server, discovers this host's compilers as `kforge serve` would.");
  add_client_options(command, *o);
  return [o] { return toolchains(*o); };
}

}  // namespace kforge::cli
