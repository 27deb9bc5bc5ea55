// `kforge serve`: builds the configuration from the settings (service/serve_config.hpp),
// then wires the layers together — DiskTier, Toolchains, Sandbox, the Redis tier and cluster, Storage, Builder,
// Bencher, Auth (core) and the Server (api) — and serves until SIGINT or SIGTERM.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

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
#include "core/cluster/lease.hpp"
#include "core/cluster/registry.hpp"
#include "core/base/fsutil.hpp"
#include "core/storage/redis_tier.hpp"
#include "core/storage/storage.hpp"
#include "core/base/log.hpp"
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

// Wires the layers from `c` and serves until a signal. Everything it says is a log record
// (core/base/log.hpp); stdout has one line, `listening on URL`.
int serve(ServeConfig c) {
  namespace log = core::log;
  log::configure(c.log_format, c.log_level);
  auto fatal = [](const std::string& why, int code) {
    log::error("fatal", why);
    return code;
  };
  api::ServerConfig& cfg = c.server;
  if (cfg.max_connections == 0) cfg.max_connections = default_max_connections();
  if (!c.tls.empty()) log::info("tls", "TLS with " + cfg.tls_cert + ": " + c.tls).str("cert", cfg.tls_cert);
  if (c.auth.enabled()) {
    log::info("auth", "auth on: " + std::to_string(c.auth.tokens()) + " token(s) from " + c.token_file)
        .num("tokens", uint64_t{c.auth.tokens()})
        .str("token_file", c.token_file);
  } else {
    log::warn("auth", "auth off (no --token-file): open to anyone who can reach " + cfg.host +
                          (c.open_to_all ? " (--insecure-public)" : ""))
        .str("host", cfg.host);
  }

  // Signals are taken by one thread; every other thread (httplib's pool) inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<core::storage::DiskTier> store;
  try {
    store = std::make_unique<core::storage::DiskTier>(fs::absolute(c.cache_dir).lexically_normal());
  } catch (const std::exception& e) {
    return fatal("cannot use cache directory " + c.cache_dir.string() + ": " + e.what(), kExitFailed);
  }
  // A test seam (tests/integration): the store's clock runs ahead, so that a fresh file
  // need not be waited out before its verification is memoised (DiskTier::advance_clock).
  if (const char* ms = std::getenv("KFORGE_TEST_CLOCK_OFFSET_MS"))
    store->advance_clock(std::chrono::milliseconds(std::atoll(ms)));
  const size_t cleared = store->clear_staging();
  log::info("cache", "cache at " + store->root().string() + " (cleared " + std::to_string(cleared) + " staging item(s))")
      .str("root", store->root().string())
      .num("cleared", uint64_t{cleared});
  core::Toolchains toolchains = core::Toolchains::discover();
  for (const auto& lib : c.libraries) {
    log::info("library", "library " + lib.name + " at " + lib.root.string() + " (" + std::to_string(lib.files) +
                             " files, identity " + lib.identity.substr(0, 16) + ")")
        .str("name", lib.name)
        .str("root", lib.root.string())
        .str("identity", lib.identity);
  }
  toolchains.set_libraries(std::move(c.libraries));
  for (core::Backend b : core::kAllBackends) {
    const auto& tc = toolchains.get(b);
    const std::string name(core::backend_name(b));
    log::info("toolchain", name + ": " + (tc.available ? tc.compiler.string() + " (" + tc.version_line() + ")"
                                                        : "unavailable: " + tc.reason))
        .str("backend", name)
        .json("compiler", tc.available ? nlohmann::json(tc.compiler.string()) : nlohmann::json(nullptr));
  }
  auto sandbox = core::Sandbox::make(c.sandbox_mode, toolchain_roots(toolchains), c.sandbox_limits);
  if (!sandbox) return fatal(sandbox.error().message, kExitUsage);
  log::info("sandbox", "sandbox " + std::string(sandbox->mode_name()) + " (" + sandbox->reason() + ")")
      .str("mode", sandbox->mode_name());
  // Every compile would fail (with a compiler's "cannot open" error): say why, at start.
  if (const std::string why = sandbox->cannot_reach(store->root()); !why.empty()) return fatal(why, kExitUsage);
  // A cluster member (--redis): the shared tier, build leases and the instance registry,
  // all over one Redis connection pool.
  std::unique_ptr<core::storage::Redis> redis;
  std::unique_ptr<core::storage::RedisTier> shared;
  std::unique_ptr<core::cluster::Registry> registry;
  std::unique_ptr<core::cluster::Leases> leases;
  if (c.redis) {
    redis = std::make_unique<core::storage::Redis>(core::storage::Redis::Options{*c.redis});
    shared = std::make_unique<core::storage::RedisTier>(*redis, c.redis_max_blob, [&store] { return store->now_seconds(); });
    registry = std::make_unique<core::cluster::Registry>(*redis, cfg.instance);
    leases = std::make_unique<core::cluster::Leases>(*redis, cfg.instance, registry.get());
    const bool up = redis->probe();
    log::info("redis", "shared tier " + c.redis->redacted() + " as instance " + cfg.instance +
                           (up ? " (up)" : " (down: serving from the local tier until it answers)"))
        .str("redis", c.redis->redacted())
        .str("instance", cfg.instance)
        .str("state", up ? "up" : "down");
  }
  core::storage::Storage storage(*store, shared.get());
  core::Builder builder(toolchains, storage, c.build, sandbox->spawner());
  builder.set_leases(leases.get());
  const fs::path runner_dir = c.runner_dir.empty() ? core::executable_dir() : c.runner_dir;
  // The cpu vendor baseline runs at each kernel's target ISA (core::vendor_env), whatever
  // OPENBLAS_CORETYPE the service inherited: a baseline at another ISA is not a comparison.
  std::vector<std::string> runner_env;
  core::Bencher bencher(runner_dir, *store, c.bench_timeout, runner_env, sandbox->spawner());
  for (core::Backend b : core::kAllBackends) {
    const std::string name(core::backend_name(b));
    const auto d = bencher.devices()[name];
    const bool available = d.value("available", false);
    log::info("device", name + " device: " + (available ? d.value("name", "?") : "unavailable: " + d.value("reason", "")))
        .str("backend", name)
        .json("device", available ? nlohmann::json(d.value("name", "?")) : nlohmann::json(nullptr));
  }
  api::Server server(cfg, {builder, *store, toolchains, bencher, *sandbox, c.auth,
                          {shared.get(), leases.get(), registry.get()}});
  if (!server.valid()) {  // OpenSSL refused what check_tls_files accepted
    const std::string why = api::openssl_errors();
    return fatal("the TLS server could not be set up from --tls-cert " + cfg.tls_cert + " and --tls-key " +
                     cfg.tls_key + (why.empty() ? "" : ": " + why),
                 kExitUsage);
  }
  auto port = server.bind();
  if (!port) return fatal(port.error().message, kExitFailed);
  const std::string url = std::string(server.tls() ? "https" : "http") + "://" + cfg.host + ":" + std::to_string(*port);
  server.set_advertise_url(c.advertise_url.empty() ? url : c.advertise_url);
  // The cluster registry: a heartbeat every 2 s that expires after 10 s without one.
  std::jthread heartbeat;
  if (registry) {
    heartbeat = std::jthread([&](std::stop_token stop) {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      do registry->heartbeat(server.instance_status(), std::chrono::seconds(10));
      while (!cv.wait_for(lock, stop, std::chrono::seconds(2), [] { return false; }) && !stop.stop_requested());
    });
  }
  std::cout << "listening on " << url << "\n" << std::flush;
  log::info("listening", "listening on " + url + "; the status page is " + url + "/, try: curl -s " + url +
                             "/toolchains")
      .str("url", url);
  log::start_async();  // from here, no request's thread writes to stderr itself

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    log::info("signal", "signal " + std::to_string(sig) + ", stopping").num("signal", sig);
    server.stop();
  });
  server.run();
  // run() also returns if listening failed; make sure the waiter ends either way.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  log::stop_async();
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
    auto config = make_serve_config(*settings, ::isatty(STDERR_FILENO));
    if (!config) {
      std::cerr << "kforge serve: " << config.error() << "\n";
      return kExitUsage;
    }
    return serve(std::move(*config));
  };
}

}  // namespace kforge::cli
