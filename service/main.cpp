// The `kforge` executable: parses the command line and wires the layers together.
//   kforge serve [--host H] [--port P] [--cache-dir DIR] ...
//   kforge submit FILE.json --server URL --out DIR
//   kforge toolchains [--server URL]
#include <httplib.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "api/server.hpp"
#include "core/fsutil.hpp"
#include "core/templates/gemm.hpp"

namespace fs = std::filesystem;
using namespace kforge;

namespace {

constexpr const char* kUsage = R"(usage: kforge <command> [options]

commands:
  serve        run the compilation service
  submit FILE  send a request (FILE.json, or - for stdin) and save what comes back
  toolchains   show the compilers this host has (or a server has, with --server)

kforge serve options (each also read from the KFORGE_<NAME> environment variable,
e.g. KFORGE_PORT; a flag wins over the environment):
  --host H               address to bind                      [127.0.0.1]
  --port P               port; 0 picks a free one             [8080]
  --cache-dir DIR        cache root        [$XDG_CACHE_HOME/kforge or ./.kforge-cache]
  --compile-timeout S    wall-clock limit per compiler run, s [300]
  --negative-ttl S       how long a compile error stays cached, s [600]
  --max-body BYTES       largest request body                 [4194304]
  --max-source BYTES     largest kernel source                [1048576]
  --runner-dir DIR       where kforge-runner-{cpu,cuda,rocm} are [beside kforge]
  --bench-timeout S      wall-clock limit per benchmark run, s [120]
The first line on stdout is `listening on http://HOST:PORT`.

kforge submit FILE --server URL [--out DIR]
  POSTs FILE to URL/kernels; with --out, writes <name>.so, the source, <name>_wrapper.py
  (the ctypes wrapper; it loads <name>.so beside it), <name>.h (the C++ wrapper) and
  <name>.json (the full answer) into DIR. Prints the summary.

kforge toolchains [--server URL]
)";

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
};

std::optional<Args> parse_args(int argc, char** argv, int first) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      a.flags["help"] = "1";
    } else if (s.starts_with("--")) {
      std::string name = s.substr(2);
      std::string value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        std::cerr << "kforge: --" << name << " needs a value\n";
        return std::nullopt;
      }
      a.flags[name] = value;
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

// Flag, then KFORGE_<NAME>, then the default.
std::string setting(const Args& a, const std::string& name, const std::string& fallback) {
  if (auto it = a.flags.find(name); it != a.flags.end()) return it->second;
  std::string env = "KFORGE_";
  for (char c : name)
    env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (const char* v = std::getenv(env.c_str()); v && *v) return v;
  return fallback;
}

long long number(const std::string& name, const std::string& value) {
  try {
    size_t used = 0;
    long long n = std::stoll(value, &used);
    if (used == value.size() && n >= 0) return n;
  } catch (...) {
  }
  std::cerr << "kforge: --" << name << " must be a non-negative integer, got `" << value << "`\n";
  std::exit(2);
}

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kforge";
  return "./.kforge-cache";
}

int serve(const Args& a) {
  static const std::vector<std::string> kKnown = {
      "host",         "port",     "cache-dir",  "compile-timeout",
      "negative-ttl", "max-body", "max-source", "runner-dir", "bench-timeout", "help"};
  for (const auto& [k, v] : a.flags) {
    if (std::find(kKnown.begin(), kKnown.end(), k) == kKnown.end()) {
      std::cerr << "kforge serve: unknown option --" << k << "\n" << kUsage;
      return 2;
    }
  }
  api::ServerConfig cfg;
  cfg.host = setting(a, "host", "127.0.0.1");
  cfg.port = static_cast<int>(number("port", setting(a, "port", "8080")));
  cfg.max_body_bytes = number("max-body", setting(a, "max-body", "4194304"));
  cfg.limits.max_source_bytes = number("max-source", setting(a, "max-source", "1048576"));
  core::BuildConfig bcfg;
  bcfg.compile_timeout =
      std::chrono::seconds(number("compile-timeout", setting(a, "compile-timeout", "300")));
  bcfg.negative_ttl =
      std::chrono::seconds(number("negative-ttl", setting(a, "negative-ttl", "600")));
  fs::path cache_dir = setting(a, "cache-dir", default_cache_dir());

  // Signals are taken by one thread; every other thread (httplib's pool) inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<core::DiskStore> store;
  try {
    store = std::make_unique<core::DiskStore>(fs::absolute(cache_dir).lexically_normal());
  } catch (const std::exception& e) {
    std::cerr << "kforge: cannot use cache directory " << cache_dir << ": " << e.what() << "\n";
    return 1;
  }
  size_t cleared = store->clear_staging();
  std::cerr << "kforge: cache at " << store->root().string() << " (cleared " << cleared
            << " staging item(s))\n";
  const core::Toolchains toolchains = core::Toolchains::discover();
  for (core::Backend b : core::kAllBackends) {
    const auto& tc = toolchains.get(b);
    std::cerr << "kforge: " << core::backend_name(b) << ": "
              << (tc.available ? tc.compiler.string() + " (" + tc.version_line() + ")"
                               : "unavailable: " + tc.reason)
              << "\n";
  }
  core::Builder builder(toolchains, *store, bcfg);
  const fs::path runner_dir = setting(a, "runner-dir", core::executable_dir().string());
  // OpenBLAS picks its kernels from CPUID at load time and falls back to SSE3 ("Prescott")
  // on CPUs it does not recognise (common in VMs); name the family -march resolved to, so
  // the cpu baseline is OpenBLAS at its best on this host. An explicit setting wins.
  std::vector<std::string> runner_env;
  if (const char* ct = std::getenv("OPENBLAS_CORETYPE"); ct && *ct) {
    runner_env.push_back(std::string("OPENBLAS_CORETYPE=") + ct);
  } else if (const auto& cpu = toolchains.get(core::Backend::kCpu); cpu.native) {
    const int width = core::templates::cpu_vector_width(*cpu.native);
    if (width >= 16) runner_env.push_back("OPENBLAS_CORETYPE=SkylakeX");
    else if (width == 8) runner_env.push_back("OPENBLAS_CORETYPE=Haswell");
  }
  core::Bencher bencher(runner_dir, *store,
                        std::chrono::seconds(number("bench-timeout", setting(a, "bench-timeout", "120"))),
                        runner_env);
  for (core::Backend b : core::kAllBackends) {
    const auto d = bencher.devices()[std::string(core::backend_name(b))];
    std::cerr << "kforge: " << core::backend_name(b) << " device: "
              << (d.value("available", false) ? d.value("name", "?") : "unavailable: " + d.value("reason", ""))
              << "\n";
  }
  core::Autotuner autotuner(builder, bencher, *store, std::max(1u, std::thread::hardware_concurrency()),
                            [](const std::string& line) { std::cerr << line << "\n"; });
  api::Server server(cfg, builder, *store, toolchains, bencher, autotuner);
  auto port = server.bind();
  if (!port) {
    std::cerr << "kforge: " << port.error().message << "\n";
    return 1;
  }
  std::string url = "http://" + cfg.host + ":" + std::to_string(*port);
  std::cout
      << "listening on " << url << "\n"
      << "try:\n"
      << "  curl -s " << url << "/toolchains\n"
      << "  curl -s " << url
      << "/kernels -H 'Content-Type: application/json' -d '{\"backend\": "
         "\"cpu\", \"arch\": \"native\", \"source\": \"#include <cstddef>\\n#include <cstdint>\\n"
         "#define PT_EXPORT __attribute__((visibility(\\\"default\\\")))\\nextern \\\"C\\\" "
         "PT_EXPORT "
         "int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* "
         "workspace, void* stream) { if (workspace_size) { *workspace_size = 0; return 0; } for "
         "(int64_t i = 0; i < n; ++i) y[i] = 2 * x[i]; return 0; }\"}'\n"
      << std::flush;

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::cerr << "kforge: signal " << sig << ", stopping\n";
    server.stop();
  });
  server.run();
  // run() also returns if listening failed; make sure the waiter ends either way.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  return 0;
}

std::optional<httplib::Client> client_for(const std::string& server) {
  if (server.empty()) {
    std::cerr << "kforge: --server URL is required\n";
    return std::nullopt;
  }
  httplib::Client c(server);
  c.set_connection_timeout(10);
  c.set_read_timeout(3600);  // a cold compile can take minutes
  return c;
}

int submit(const Args& a) {
  if (a.positional.size() != 1) {
    std::cerr << "kforge submit: expected one FILE.json (or -)\n";
    return 2;
  }
  std::string body;
  if (a.positional[0] == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    body = ss.str();
  } else {
    auto r = core::read_file(a.positional[0]);
    if (!r) {
      std::cerr << "kforge submit: " << r.error().message << "\n";
      return 2;
    }
    body = *r;
  }
  auto cli = client_for(setting(a, "server", ""));
  if (!cli) return 2;
  auto res = cli->Post("/kernels", body, "application/json");
  if (!res) {
    std::cerr << "kforge submit: cannot reach " << setting(a, "server", "") << ": "
              << httplib::to_string(res.error()) << "\n";
    return 1;
  }
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (res->status != 200 || j.is_discarded()) {
    std::cerr << "kforge submit: HTTP " << res->status << "\n";
    if (!j.is_discarded()) {
      std::cerr << j.value("detail", "") << "\n";
      for (const auto& e : j.value("errors", nlohmann::json::array())) {
        std::cerr << "  " << e.value("field", "") << ": " << e.value("message", "") << "\n";
      }
      if (j.contains("log")) std::cerr << j["log"].get<std::string>();
    } else {
      std::cerr << res->body << "\n";
    }
    return 1;
  }
  const std::string name = j["kernel_name"];
  std::cout << "kernel   " << name << "\n"
            << "key      " << j["key"].get<std::string>() << "\n"
            << "cache    " << j.value("cache", "") << "\n"
            << "artifact " << j["artifact"]["bytes"] << " bytes, sha256 "
            << j["artifact"]["sha256"].get<std::string>() << "\n"
            << "compile  " << j["compile"].value("seconds", 0.0) << " s\n";
  if (auto it = a.flags.find("out"); it != a.flags.end()) {
    fs::path out = it->second;
    fs::create_directories(out);
    auto fetch = [&](const std::string& url, const fs::path& dest) -> bool {
      auto r = cli->Get(url);
      if (!r || r->status != 200) {
        std::cerr << "kforge submit: GET " << url << " failed\n";
        return false;
      }
      return core::write_file_atomic(dest, r->body).has_value();
    };
    std::string ext = j["backend"] == "cpu" ? ".cpp" : j["backend"] == "cuda" ? ".cu" : ".hip";
    bool ok =
        fetch(j["artifact"]["url"], out / (name + ".so")) &&
        fetch(j["source_url"], out / (name + ext)) &&
        (!j.contains("object") || fetch(j["object"]["url"], out / (name + ".o"))) &&
        core::write_file_atomic(out / (name + "_wrapper.py"),
                                j["wrapper"]["python"].get<std::string>()) &&
        core::write_file_atomic(out / (name + ".h"), j["wrapper"]["cpp"].get<std::string>()) &&
        core::write_file_atomic(out / (name + ".json"), j.dump(2));
    if (!ok) return 1;
    std::cout << "written  " << (out / name).string() << ".{so," << ext.substr(1) << ",h,json} and "
              << name << "_wrapper.py\n";
  }
  return 0;
}

int toolchains(const Args& a) {
  std::string server = setting(a, "server", "");
  if (server.empty()) {
    std::cout << core::Toolchains::discover().to_json().dump(2) << "\n";
    return 0;
  }
  auto cli = client_for(server);
  auto res = cli->Get("/toolchains");
  if (!res || res->status != 200) {
    std::cerr << "kforge toolchains: cannot query " << server << "\n";
    return 1;
  }
  std::cout << res->body;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "kforge " << KFORGE_VERSION << "\n";
    return 0;
  }
  auto args = parse_args(argc, argv, 2);
  if (!args) return 2;
  if (args->flags.contains("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "serve") return serve(*args);
  if (cmd == "submit") return submit(*args);
  if (cmd == "toolchains") return toolchains(*args);
  std::cerr << "kforge: unknown command `" << cmd << "`\n" << kUsage;
  return 2;
}
