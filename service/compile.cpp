// `kforge compile FILE --server URL [--out DIR]` (or `kforge submit`, its older name): POSTs
// a request to /kernels, follows a 202 to its job, prints the summary and, with --out, writes
// what a build needs beside it.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include <CLI/CLI.hpp>

#include "core/base/fsutil.hpp"
#include "service/client.hpp"
#include "service/commands.hpp"

namespace kforge::cli {
namespace fs = std::filesystem;
namespace {

struct Options {
  ClientOptions client;
  std::string file;
  std::string out;
};

constexpr const char* kCmd = "compile";

int compile(const Options& o) {
  auto body = read_request(o.file, kCmd);
  if (!body) return kExitUsage;
  auto cli = client_for(o.client, kCmd);
  if (!cli) return kExitUsage;
  auto res = post_json(*cli, o.client, kCmd, "/kernels", *body);
  if (!res) return kExitUnreachable;
  int status = res->status;
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  // 202: the build outlived the request; follow its job until it ends.
  for (std::string location = res->get_header_value("Location"); status == 202 && !location.empty();) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto poll = cli->Get(location);
    if (!poll) {
      print_unreachable(kCmd, o.client, poll.error());
      return kExitUnreachable;
    }
    if (poll->status != 200) {
      std::cerr << "kforge " << kCmd << ": cannot follow " << location << ": HTTP " << poll->status << "\n";
      return kExitFailed;
    }
    auto job = nlohmann::json::parse(poll->body, nullptr, false);
    if (job.is_object() && (job["state"] == "done" || job["state"] == "failed")) {
      status = job.value("http_status", 500);
      j = job["result"];
    }
  }
  if (status != 200 || !j.is_object()) {
    print_failure(kCmd, status, j, res->body);
    return kExitFailed;
  }
  const std::string name = j["kernel_name"];
  std::cout << "kernel   " << name << "\n"
            << "key      " << j["key"].get<std::string>() << "\n"
            << "cache    " << j.value("cache", "") << "\n"
            << "artifact " << j["artifact"]["bytes"] << " bytes, sha256 " << j["artifact"]["sha256"].get<std::string>()
            << "\n"
            << "compile  " << j["compile"].value("seconds", 0.0) << " s\n";
  if (o.out.empty()) return kExitOk;
  const fs::path out = o.out;
  fs::create_directories(out);
  auto fetch = [&](const std::string& url, const fs::path& dest) -> bool {
    auto r = cli->Get(url);
    if (!r || r->status != 200) {
      std::cerr << "kforge " << kCmd << ": GET " << url << " failed\n";
      return false;
    }
    return core::write_file_atomic(dest, r->body).has_value();
  };
  const std::string ext = j["backend"] == "cpu" ? ".cpp" : j["backend"] == "cuda" ? ".cu" : ".hip";
  const bool ok = fetch(j["artifact"]["url"], out / (name + ".so")) && fetch(j["source_url"], out / (name + ext)) &&
                  (!j.contains("object") || fetch(j["object"]["url"], out / (name + ".o"))) &&
                  core::write_file_atomic(out / (name + "_wrapper.py"), j["wrapper"]["python"].get<std::string>()) &&
                  core::write_file_atomic(out / (name + ".h"), j["wrapper"]["cpp"].get<std::string>()) &&
                  core::write_file_atomic(out / (name + ".json"), j.dump(2));
  if (!ok) return kExitFailed;
  std::cout << "written  " << (out / name).string() << ".{so," << ext.substr(1) << ",h,json} and " << name
            << "_wrapper.py\n";
  return kExitOk;
}

}  // namespace

Run declare_compile(CLI::App& command) {
  auto o = std::make_shared<Options>();
  command.footer(
      "POSTs FILE to URL/kernels (following a 202 to its job) and prints the summary. With --out,\n"
      "writes <name>.so, the source, <name>_wrapper.py (the ctypes wrapper; it loads <name>.so\n"
      "beside it), <name>.h (the C++ wrapper) and <name>.json (the full answer) into DIR.");
  command.add_option("FILE", o->file, "the request, a POST /kernels body (- for stdin)")->required()->type_name("");
  add_client_options(command, o->client);
  command.add_option("--out", o->out, "write the kernel's files into this directory")->type_name("DIR");
  return [o] { return compile(*o); };
}

}  // namespace kforge::cli
