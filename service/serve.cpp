// `kforge serve`: builds the configuration from the settings (service/serve_config.hpp),
// then wires the layers together — DiskStore, Toolchains, Sandbox, RedisTier, Builder,
// Bencher, Auth (core) and the Server (api) — and serves until SIGINT or SIGTERM.
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "api/server.hpp"
#include "api/tls.hpp"
#include "core/fsutil.hpp"
#include "service/commands.hpp"
#include "service/serve_config.hpp"

namespace kforge::cli {
namespace fs = std::filesystem;
namespace {

// --max-connections 0: the descriptor limit, raised to its hard limit first, less 256 kept
// for the cache's files, compilers' pipes and Redis.
size_t default_max_connections() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  const rlim_t n = lim.rlim_cur == RLIM_INFINITY ? rlim_t(1) << 20 : lim.rlim_cur;
  return n > 512 ? size_t(n - 256) : size_t(n / 2);
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.starts_with("127.");
}

// Toolchain roots outside /usr that a sandboxed compiler must still see (e.g. /opt/rocm).
std::vector<fs::path> toolchain_roots(const core::Toolchains& toolchains) {
  std::vector<fs::path> roots;
  for (core::Backend b : core::kAllBackends) {
    const auto& tc = toolchains.get(b);
    if (!tc.available) continue;
    std::error_code ec;
    fs::path real = fs::canonical(tc.compiler, ec);
    if (ec || real.string().starts_with("/usr/")) continue;
    roots.push_back(real.parent_path().parent_path());  // <root>/bin/<compiler>
  }
  for (const auto& lib : toolchains.libraries()) roots.push_back(lib.root);  // read-only
  return roots;
}

// The --library list (NAME=PATH, comma-separated), loaded; false after saying why.
bool load_libraries(const std::string& specs, core::Toolchains& toolchains) {
  std::vector<core::HeaderLibrary> libs;
  for (size_t b = 0; b < specs.size();) {
    size_t e = specs.find(',', b);
    if (e == std::string::npos) e = specs.size();
    if (e > b) {
      auto lib = core::load_library(std::string_view(specs).substr(b, e - b));
      if (!lib) {
        std::cerr << "kforge serve: " << lib.error().message << "\n";
        return false;
      }
      if (std::any_of(libs.begin(), libs.end(), [&](const auto& l) { return l.name == lib->name; })) {
        std::cerr << "kforge serve: --library " << lib->name << " is given twice\n";
        return false;
      }
      std::cerr << "kforge: library " << lib->name << " at " << lib->root.string() << " (" << lib->files
                << " files, identity " << lib->identity.substr(0, 16) << ")\n";
      libs.push_back(std::move(*lib));
    }
    b = e + 1;
  }
  toolchains.set_libraries(std::move(libs));
  return true;
}

void print_banner(const std::string& url) {
  std::cout << "listening on " << url << "\n"
            << "status page: " << url << "/\n"
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
}

// Wires the layers from `c` and serves until a signal.
int serve(ServeConfig c) {
  api::ServerConfig& cfg = c.server;
  if (cfg.max_connections == 0) cfg.max_connections = default_max_connections();
  // The pair is checked before anything else starts: a certificate that has expired, is not
  // valid yet or is not the key's is refused here, not at every client's handshake.
  if (!cfg.tls_cert.empty()) {
    auto tls = api::check_tls_files(cfg.tls_cert, cfg.tls_key);
    if (!tls) {
      std::cerr << "kforge serve: " << tls.error().message << "\n";
      return kExitUsage;
    }
    std::cerr << "kforge: TLS with " << cfg.tls_cert << ": " << *tls << "\n";
  }
  api::Auth auth;
  if (!c.token_file.empty()) {
    auto loaded = api::Auth::load(c.token_file);
    if (!loaded) {
      const auto& e = loaded.error();
      std::cerr << "kforge serve: " << (e.fields.empty() ? e.message : e.fields[0].field + ": " + e.fields[0].message)
                << "\n";
      return kExitUsage;
    }
    auth = std::move(*loaded);
    std::cerr << "kforge: auth on: " << auth.tokens() << " token(s) from " << c.token_file << "\n";
  } else {
    if (!is_loopback(cfg.host)) {
      std::cerr << "kforge: no --token-file, so binding 127.0.0.1 instead of " << cfg.host << "\n";
      cfg.host = "127.0.0.1";
    }
    std::cerr << "kforge: auth off (no --token-file): open to anyone who can reach " << cfg.host << "\n";
  }

  // Signals are taken by one thread; every other thread (httplib's pool) inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<core::DiskStore> store;
  try {
    store = std::make_unique<core::DiskStore>(fs::absolute(c.cache_dir).lexically_normal());
  } catch (const std::exception& e) {
    std::cerr << "kforge: cannot use cache directory " << c.cache_dir << ": " << e.what() << "\n";
    return kExitFailed;
  }
  const size_t cleared = store->clear_staging();
  std::cerr << "kforge: cache at " << store->root().string() << " (cleared " << cleared << " staging item(s))\n";
  core::Toolchains toolchains = core::Toolchains::discover();
  if (!load_libraries(c.libraries, toolchains)) return kExitUsage;
  for (core::Backend b : core::kAllBackends) {
    const auto& tc = toolchains.get(b);
    std::cerr << "kforge: " << core::backend_name(b) << ": "
              << (tc.available ? tc.compiler.string() + " (" + tc.version_line() + ")" : "unavailable: " + tc.reason)
              << "\n";
  }
  auto sandbox = core::Sandbox::make(c.sandbox_mode, toolchain_roots(toolchains), c.sandbox_limits);
  if (!sandbox) {
    std::cerr << "kforge serve: " << sandbox.error().message << "\n";
    return kExitUsage;
  }
  std::cerr << "kforge: sandbox " << sandbox->mode_name() << " (" << sandbox->reason() << ")\n";
  // Every compile would fail (with a compiler's "cannot open" error): say why, at start.
  if (const std::string why = sandbox->cannot_reach(store->root()); !why.empty()) {
    std::cerr << "kforge serve: " << why << "\n";
    return kExitUsage;
  }
  std::unique_ptr<core::RedisTier> remote;
  if (c.redis) {
    core::RedisTier::Options ro;
    ro.url = *c.redis;
    ro.instance = cfg.instance;
    ro.max_blob = c.redis_max_blob;
    remote = std::make_unique<core::RedisTier>(ro);
    std::cerr << "kforge: shared tier " << c.redis->redacted() << " as instance " << cfg.instance
              << (remote->probe() ? " (up)" : " (down: serving from the local tier until it answers)") << "\n";
  }
  core::Builder builder(toolchains, *store, c.build, sandbox->spawner());
  builder.set_remote(remote.get());
  const fs::path runner_dir = c.runner_dir.empty() ? core::executable_dir() : c.runner_dir;
  // The cpu vendor baseline runs at each kernel's target ISA (core::vendor_env), whatever
  // OPENBLAS_CORETYPE the service inherited: a baseline at another ISA is not a comparison.
  std::vector<std::string> runner_env;
  core::Bencher bencher(runner_dir, *store, c.bench_timeout, runner_env, sandbox->spawner());
  for (core::Backend b : core::kAllBackends) {
    const auto d = bencher.devices()[std::string(core::backend_name(b))];
    std::cerr << "kforge: " << core::backend_name(b) << " device: "
              << (d.value("available", false) ? d.value("name", "?") : "unavailable: " + d.value("reason", ""))
              << "\n";
  }
  api::Server server(cfg, {builder, *store, toolchains, bencher, *sandbox, auth});
  if (!server.valid()) {  // OpenSSL refused what check_tls_files accepted
    const std::string why = api::openssl_errors();
    std::cerr << "kforge serve: the TLS server could not be set up from --tls-cert " << cfg.tls_cert
              << " and --tls-key " << cfg.tls_key << (why.empty() ? "" : ": " + why) << "\n";
    return kExitUsage;
  }
  auto port = server.bind();
  if (!port) {
    std::cerr << "kforge: " << port.error().message << "\n";
    return kExitFailed;
  }
  const std::string url = std::string(server.tls() ? "https" : "http") + "://" + cfg.host + ":" + std::to_string(*port);
  server.set_advertise_url(c.advertise_url.empty() ? url : c.advertise_url);
  // The cluster registry: a heartbeat every 2 s that expires after 10 s without one.
  std::jthread heartbeat;
  if (remote) {
    heartbeat = std::jthread([&](std::stop_token stop) {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      do remote->heartbeat(server.instance_status(), std::chrono::seconds(10));
      while (!cv.wait_for(lock, stop, std::chrono::seconds(2), [] { return false; }) && !stop.stop_requested());
    });
  }
  print_banner(url);

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
  return kExitOk;
}

}  // namespace

Run declare_serve(CLI::App& command) {
  auto settings = std::make_shared<ServeSettings>();
  command.footer(
      "Each setting is a flag, the environment variable KFORGE_<NAME> (e.g. KFORGE_PORT), or a\n"
      "`NAME = value` line in the --config file; that is also the order of precedence.\n"
      "The first line on stdout is `listening on http://HOST:PORT`.");
  settings->declare(command);
  return [settings] {
    if (auto read = settings->read_config_file(); !read) {
      std::cerr << "kforge serve: " << read.error() << "\n";
      return kExitUsage;
    }
    auto config = make_serve_config(*settings);
    if (!config) {
      std::cerr << "kforge serve: " << config.error() << "\n";
      return kExitUsage;
    }
    return serve(std::move(*config));
  };
}

}  // namespace kforge::cli
