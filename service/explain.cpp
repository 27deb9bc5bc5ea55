// `kforge explain FILE --server URL [--json]`: asks POST /explain whether the request would
// hit, and if not, why: the nearest cached entry of the same kernel and each input that
// differs. Compiles nothing.
#include <algorithm>
#include <ctime>
#include <iostream>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

#include "service/client.hpp"
#include "service/commands.hpp"

namespace kforge::cli {
namespace {

struct Options {
  ClientOptions client;
  std::string file;
  bool json = false;
};

std::string utc_time(int64_t unix_s) {
  const std::time_t t = unix_s;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// The reason a miss-explanation gives, one input per line (a source diff indented below).
void print_miss_reason(const nlohmann::json& reason) {
  auto text = [](const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_string(); })) {
      std::string out;
      for (const auto& x : v) out += (out.empty() ? "" : " ") + x.get<std::string>();
      return out.empty() ? std::string("(none)") : out;
    }
    return v.dump();
  };
  for (const auto& item : reason) {
    const std::string input = item.value("input", "");
    if (item.contains("detail") && !item.contains("was")) {
      std::cout << "  " << input << ": " << item["detail"].get<std::string>() << "\n";
      continue;
    }
    if (item.contains("diff")) {
      std::cout << "  " << input << ":\n";
      std::istringstream lines(item["diff"].get<std::string>());
      for (std::string line; std::getline(lines, line);) std::cout << "    " << line << "\n";
      continue;
    }
    std::cout << "  " << input << ": was " << text(item["was"]) << ", now " << text(item["now"]);
    if (item.contains("detail")) std::cout << " (" << item["detail"].get<std::string>() << ")";
    std::cout << "\n";
  }
}

int explain(const Options& o) {
  auto body = read_request(o.file, "explain");
  if (!body) return kExitUsage;
  auto cli = client_for(o.client, "explain");
  if (!cli) return kExitUsage;
  auto res = post_json(*cli, o.client, "explain", "/explain", *body);
  if (!res) return kExitUnreachable;
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (res->status != 200 || !j.is_object()) {
    print_failure("explain", res->status, j, res->body);
    return kExitFailed;
  }
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "kernel   " << j.value("kernel_name", "") << "\n"
            << "key      " << j.value("key", "") << "\n"
            << "cache    " << j.value("cache", "") << "\n";
  const auto& near = j["nearest"];
  if (near.is_object()) {
    std::cout << "nearest  " << near.value("key", "") << " (" << near.value("kernel_name", "") << ", built "
              << utc_time(near.value("created_at", int64_t{0})) << ")\n";
  }
  if (!j.value("miss_reason", nlohmann::json::array()).empty()) {
    std::cout << "why\n";
    print_miss_reason(j["miss_reason"]);
  }
  return kExitOk;
}

}  // namespace

Run declare_explain(CLI::App& command) {
  auto o = std::make_shared<Options>();
  command.footer(
      "Asks URL/explain whether the request in FILE would hit, and if not, why: the nearest\n"
      "cached entry of the same kernel and each input that differs (compiler, flags, arch, a\n"
      "template parameter, tensors, a source diff). Compiles nothing.");
  command.add_option("FILE", o->file, "the request, a POST /kernels body (- for stdin)")->required()->type_name("");
  add_client_options(command, o->client);
  command.add_flag("--json", o->json, "print the server's answer as it is");
  return [o] { return explain(*o); };
}

}  // namespace kforge::cli
