// The `kforge` executable: parses the command line and wires the layers together.
//   kforge serve [--host H] [--port P] [--cache-dir DIR] ...
//   kforge submit FILE.json --server URL --out DIR
//   kforge explain FILE.json --server URL
//   kforge prefetch MANIFEST --server URL
//   kforge toolchains [--server URL]
//   kforge cache stats|gc|verify|export|import [--cache-dir DIR] ...
#include <httplib.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "api/server.hpp"
#include "api/tls.hpp"
#include "core/storage/archive.hpp"
#include "core/fsutil.hpp"
#include "core/templates/gemm.hpp"
#include "service/commands.hpp"

namespace fs = std::filesystem;
using namespace kforge;
using namespace kforge::cli;

namespace {

constexpr const char* kUsage = R"(usage: kforge <command> [options]

commands:
  serve              run the compilation service (kforge serve --help lists its settings)
  submit FILE        send a request (FILE.json, or - for stdin) and save what comes back
  explain FILE       would this request hit the cache, and if not, why not
  toolchains         show the compilers this host has (or a server has, with --server)
  prefetch MANIFEST  compile on a server whatever of a recorded list of requests it lacks
  cache stats|gc|verify|export|import
                     look after a cache directory (also while a server uses it)

kforge submit FILE --server URL [--out DIR] [--token T]
  POSTs FILE to URL/kernels (following a 202 to its job); with --out, writes <name>.so,
  the source, <name>_wrapper.py (the ctypes wrapper; it loads <name>.so beside it),
  <name>.h (the C++ wrapper) and <name>.json (the full answer) into DIR. Prints the
  summary. --token (or KFORGE_TOKEN) is sent as `Authorization: Bearer`.

kforge explain FILE --server URL [--token T] [--json]
  asks URL/explain whether the request in FILE (or - for stdin) would hit, and if not,
  why: the nearest cached entry of the same kernel and each input that differs (compiler,
  flags, arch, a template parameter, tensors, a source diff). Compiles nothing.

kforge prefetch MANIFEST --server URL [--token T]
  POSTs the requests in MANIFEST to URL/prefetch and follows the job: a progress bar on a
  terminal, else one line per finished request; then a summary and each failure's error.
  MANIFEST (or - for stdin) is a manifest {"format": "kforge-prefetch/1", "requests": [...]},
  a JSON list of requests, or JSON lines of requests (what a client records with
  KFORGE_RECORD=FILE). Exit status 0 when every request is a hit or built, 1 otherwise.

kforge toolchains [--server URL] [--token T]

kforge cache stats  [--cache-dir DIR]               entries, bytes, negative entries
kforge cache gc     [--cache-dir DIR] [--max-bytes N]
                    drop expired compile errors, dangling request keys and family
                    links, dead staging; with --max-bytes, evict least recently used
                    entries down to N
kforge cache verify [--cache-dir DIR]               re-hash every file; drop corrupt entries
kforge cache export [--cache-dir DIR] [--since T] [--match FIELD=GLOB]... -o FILE
                    write the cache's kernels to one archive (tar + zstd; FILE - is stdout).
                    T: unix seconds or an ISO-8601 UTC date/time; FIELD: key, backend,
                    kernel_name, arch or template; every --match must hold
kforge cache import FILE [--cache-dir DIR]
                    verify every file of the archive, then publish its kernels (nothing
                    when anything fails; entries already there are left as they are)
)";

// Every setting of `kforge serve`: a flag --NAME, the variable KFORGE_<NAME>, or a line
// `NAME = value` in the --config file; in that order of precedence, then the default.
struct SettingSpec {
  const char* name;
  const char* fallback;  // "" for none
  const char* help;
};
constexpr SettingSpec kServeSettings[] = {
    {"config", "", "a file of `name = value` lines for any setting below"},
    {"host", "127.0.0.1", "address to bind; without --token-file only loopback is allowed"},
    {"port", "8080", "port; 0 picks a free one"},
    {"cache-dir", "", "cache root [$XDG_CACHE_HOME/kforge, or ./.kforge-cache]"},
    {"cache-max-bytes", "0", "bound on the cache; least recently used entries go first (0: none)"},
    {"compile-jobs", "", "compiles that run at once [one per core]"},
    {"max-queue", "64", "builds that may wait for a worker; more are answered 503"},
    {"compile-timeout", "300", "wall-clock limit per compiler run, s"},
    {"compile-output-cap", "4194304", "bytes of compiler output kept; more kills the compiler"},
    {"negative-ttl", "600", "how long a compile error stays cached, s"},
    {"bench-timeout", "120", "wall-clock limit per benchmark run, s"},
    {"runner-dir", "", "where kforge-runner-{cpu,cuda,rocm} are [beside kforge]"},
    {"redis", "", "redis://[:password@]HOST:PORT[/DB]: the shared cache tier of a cluster (docs/SCALING.md)"},
    {"redis-max-blob", "67108864", "largest file shared through Redis, bytes; larger kernels stay local"},
    {"redis-lease-ttl", "30", "a build lease's lifetime unless renewed, s (a dead builder's work is taken over after it)"},
    {"instance-id", "", "this instance's id in a cluster, [a-z0-9]{1,32} [derived from host name and port]"},
    {"advertise-url", "", "where this instance is reached, as the cluster registry shows it [its listening URL]"},
    {"library", "", "NAME=PATH: a header library requests may include (options.includes); repeat or separate with ,"},
    {"sandbox", "auto", "auto | bwrap | none: how compilers and runners are confined"},
    {"sandbox-uid", "65534", "uid:gid (or uid) compilers and runners run as when kforge is root"},
    {"sandbox-nproc", "1024", "RLIMIT_NPROC of compilers and runners: processes of their uid"},
    {"token-file", "", "lines `role:token` (roles read, submit, admin); none: auth off"},
    {"tls-cert", "", "PEM certificate: serve HTTPS (with --tls-key)"},
    {"tls-key", "", "PEM private key for --tls-cert"},
    {"max-body", "4194304", "largest request body, bytes"},
    {"max-import-bytes", "0", "largest POST /cache/import archive, bytes (0: --max-body); above --max-body, "
                              "other routes read a body up to this size before refusing it"},
    {"max-source", "1048576", "largest kernel source, bytes"},
    {"max-json-depth", "32", "deepest nesting of a request's JSON"},
    {"max-list", "16", "longest list in a request (archs, inputs, epilogue ops)"},
    {"max-choices", "64", "most choices in one autotune"},
    {"max-prefetch", "4096", "most requests in one POST /prefetch (each also within --max-body)"},
    {"request-deadline", "600", "longest a request waits for its build before a 202, s"},
    {"read-timeout", "30", "drop a client that sends nothing for this long, s"},
    {"header-timeout", "30", "a request head must arrive whole this long after its first byte (else 408), s"},
    {"body-timeout", "30", "a request body must arrive within this, plus its length at --min-body-rate (else 408), s"},
    {"min-body-rate", "65536", "the slowest average rate a request body may arrive at, bytes/s"},
    {"max-connections", "0", "connections open at once; more are refused (0: the descriptor limit less 256)"},
    {"max-connections-per-client", "256", "connections open at once from one client address (0: no cap; behind nginx, "
                                          "nginx's address is the client)"},
    {"write-timeout", "30", "drop a client that reads nothing for this long, s"},
    {"http-threads", "64", "requests served at once off the event loops (HTTPS: connections)"},
    {"http-loops", "0", "event loops that own the connections and answer hits (0: 4 per core, at most max(cores, 32); plain HTTP)"},
    {"job-history", "512", "finished jobs kept for /jobs"},
    {"web-dir", "", "serve the status page's own files from this directory (development)"},
    {"accel-redirect", "", "URI prefix of an nginx `internal` location that serves the cache root: downloads "
                           "answer with X-Accel-Redirect for nginx to send the file (docs/OPERATIONS.md)"},
};

std::string serve_usage() {
  std::string u =
      "usage: kforge serve [--NAME VALUE]...\n\nEach setting is a flag, the environment variable "
      "KFORGE_<NAME> (e.g. KFORGE_PORT),\nor a `NAME = value` line in the --config file; that is "
      "also the order of precedence.\nThe first line on stdout is `listening on "
      "http://HOST:PORT`.\n\n";
  for (const auto& st : kServeSettings) {
    std::string left =
        std::string("  --") + st.name + " " + (std::string(st.name) == "config" ? "FILE" : "V");
    left.resize(std::max<size_t>(left.size() + 1, 26), ' ');
    u += left + st.help + (*st.fallback ? std::string(" [") + st.fallback + "]" : "") + "\n";
  }
  return u;
}

// Reads `name = value` lines (# comments) into config_values(); false after printing the error.
bool load_config(const std::string& file) {
  std::ifstream in(file);
  if (!in) {
    std::cerr << "kforge: cannot read the config file " << file << "\n";
    return false;
  }
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    auto trim = [](std::string t) {
      t.erase(0, t.find_first_not_of(" \t"));
      t.erase(t.find_last_not_of(" \t\r") + 1);
      return t;
    };
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const auto eq = line.find('=');
    const std::string name = eq == std::string::npos ? "" : trim(line.substr(0, eq));
    const bool known =
        std::any_of(std::begin(kServeSettings), std::end(kServeSettings),
                    [&](const SettingSpec& st) { return name == st.name && name != "config"; });
    if (!known) {
      std::cerr << "kforge: " << file << ":" << n
                << ": expected `name = value` with a known setting name\n";
      return false;
    }
    config_values()[name] = trim(line.substr(eq + 1));
  }
  return true;
}

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

int serve(const Args& a) {
  if (a.flags.contains("help")) {
    std::cout << serve_usage();
    return 0;
  }
  for (const auto& [k, v] : a.flags) {
    const bool known = std::any_of(std::begin(kServeSettings), std::end(kServeSettings),
                                   [&](const SettingSpec& st) { return k == st.name; });
    if (!known) {
      std::cerr << "kforge serve: unknown option --" << k << "\n" << serve_usage();
      return 2;
    }
  }
  if (std::string file = setting(a, "config", ""); !file.empty() && !load_config(file)) return 2;
  auto get = [&](const char* name) {
    for (const auto& st : kServeSettings) {
      if (std::string(st.name) == name) return setting(a, name, st.fallback);
    }
    return std::string();
  };
  auto num = [&](const char* name) { return number(name, get(name)); };

  api::ServerConfig cfg;
  cfg.host = get("host");
  cfg.port = static_cast<int>(num("port"));
  cfg.max_body_bytes = num("max-body");
  cfg.max_import_bytes = num("max-import-bytes");
  cfg.max_json_depth = num("max-json-depth");
  cfg.limits.max_source_bytes = num("max-source");
  cfg.limits.max_archs = cfg.limits.max_inputs = cfg.limits.max_epilogue = num("max-list");
  cfg.max_choices = num("max-choices");
  cfg.max_prefetch = num("max-prefetch");
  if (!get("compile-jobs").empty()) cfg.compile_jobs = std::max<long long>(1, num("compile-jobs"));
  cfg.max_queue = num("max-queue");
  cfg.job_history = num("job-history");
  cfg.request_deadline = std::chrono::seconds(num("request-deadline"));
  cfg.read_timeout_s = static_cast<int>(num("read-timeout"));
  cfg.header_timeout_s = static_cast<int>(std::max<long long>(1, num("header-timeout")));
  cfg.body_timeout_s = static_cast<int>(std::max<long long>(1, num("body-timeout")));
  cfg.min_body_rate = std::max<long long>(1, num("min-body-rate"));
  cfg.max_connections = num("max-connections");
  cfg.max_connections_per_client = num("max-connections-per-client");
  if (cfg.max_connections == 0) cfg.max_connections = default_max_connections();
  cfg.write_timeout_s = static_cast<int>(num("write-timeout"));
  cfg.http_threads = std::max<long long>(4, num("http-threads"));
  cfg.http_loops = std::max<long long>(0, num("http-loops"));
  cfg.cache_max_bytes = num("cache-max-bytes");
  cfg.tls_cert = get("tls-cert");
  cfg.tls_key = get("tls-key");
  cfg.web_dir = get("web-dir");
  cfg.accel_redirect = get("accel-redirect");
  while (cfg.accel_redirect.ends_with('/')) cfg.accel_redirect.pop_back();
  if (!cfg.accel_redirect.empty() && !cfg.accel_redirect.starts_with('/')) {
    std::cerr << "kforge serve: --accel-redirect is a URI prefix such as /kforge-cache\n";
    return 2;
  }
  if (!get("redis").empty() || !get("instance-id").empty()) {  // a cluster member has an id
    cfg.instance = get("instance-id");
    if (cfg.instance.empty()) {  // the host name's letters and digits, and the port (or pid)
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      for (char* c = host; *c && cfg.instance.size() < 20; ++c)
        if (std::isalnum(static_cast<unsigned char>(*c))) cfg.instance += static_cast<char>(std::tolower(*c));
      cfg.instance += cfg.port ? "p" + std::to_string(cfg.port) : "x" + std::to_string(::getpid());
    }
    const bool ok = cfg.instance.size() <= 32 &&
                    cfg.instance.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") == std::string::npos;
    if (!ok) {
      std::cerr << "kforge serve: --instance-id is 1 to 32 of [a-z0-9]\n";
      return 2;
    }
  }
  if (cfg.tls_cert.empty() != cfg.tls_key.empty()) {
    std::cerr << "kforge serve: --tls-cert and --tls-key go together\n";
    return 2;
  }
  // The pair is checked before anything else starts: a certificate that has expired, is not
  // valid yet or is not the key's is refused here, not at every client's handshake.
  if (!cfg.tls_cert.empty()) {
    auto tls = api::check_tls_files(cfg.tls_cert, cfg.tls_key);
    if (!tls) {
      std::cerr << "kforge serve: " << tls.error().message << "\n";
      return 2;
    }
    std::cerr << "kforge: TLS with " << cfg.tls_cert << ": " << *tls << "\n";
  }
  core::BuildConfig bcfg;
  bcfg.compile_timeout = std::chrono::seconds(num("compile-timeout"));
  bcfg.output_cap = num("compile-output-cap");
  bcfg.negative_ttl = std::chrono::seconds(num("negative-ttl"));
  const std::string cache_setting = get("cache-dir");
  fs::path cache_dir = cache_setting.empty() ? default_cache_dir() : cache_setting;

  api::Auth auth;
  if (std::string file = get("token-file"); !file.empty()) {
    auto loaded = api::Auth::load(file);
    if (!loaded) {
      const auto& e = loaded.error();
      std::cerr << "kforge serve: "
                << (e.fields.empty() ? e.message : e.fields[0].field + ": " + e.fields[0].message)
                << "\n";
      return 2;
    }
    auth = std::move(*loaded);
    std::cerr << "kforge: auth on: " << auth.tokens() << " token(s) from " << file << "\n";
  } else {
    if (!is_loopback(cfg.host)) {
      std::cerr << "kforge: no --token-file, so binding 127.0.0.1 instead of " << cfg.host << "\n";
      cfg.host = "127.0.0.1";
    }
    std::cerr << "kforge: auth off (no --token-file): open to anyone who can reach " << cfg.host
              << "\n";
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
    store = std::make_unique<core::storage::DiskTier>(fs::absolute(cache_dir).lexically_normal());
  } catch (const std::exception& e) {
    std::cerr << "kforge: cannot use cache directory " << cache_dir << ": " << e.what() << "\n";
    return 1;
  }
  // A test seam (tests/integration): the store's clock runs ahead, so that a fresh file
  // need not be waited out before its verification is memoised (DiskTier::advance_clock).
  if (const char* ms = std::getenv("KFORGE_TEST_CLOCK_OFFSET_MS"))
    store->advance_clock(std::chrono::milliseconds(std::atoll(ms)));
  size_t cleared = store->clear_staging();
  std::cerr << "kforge: cache at " << store->root().string() << " (cleared " << cleared
            << " staging item(s))\n";
  core::Toolchains toolchains = core::Toolchains::discover();
  {
    std::vector<core::HeaderLibrary> libs;
    std::string specs = get("library");
    for (size_t b = 0; b < specs.size();) {
      size_t e = specs.find(',', b);
      if (e == std::string::npos) e = specs.size();
      if (e > b) {
        auto lib = core::load_library(std::string_view(specs).substr(b, e - b));
        if (!lib) {
          std::cerr << "kforge serve: " << lib.error().message << "\n";
          return 2;
        }
        if (std::any_of(libs.begin(), libs.end(), [&](const auto& l) { return l.name == lib->name; })) {
          std::cerr << "kforge serve: --library " << lib->name << " is given twice\n";
          return 2;
        }
        std::cerr << "kforge: library " << lib->name << " at " << lib->root.string() << " (" << lib->files
                  << " files, identity " << lib->identity.substr(0, 16) << ")\n";
        libs.push_back(std::move(*lib));
      }
      b = e + 1;
    }
    toolchains.set_libraries(std::move(libs));
  }
  for (core::Backend b : core::kAllBackends) {
    const auto& tc = toolchains.get(b);
    std::cerr << "kforge: " << core::backend_name(b) << ": "
              << (tc.available ? tc.compiler.string() + " (" + tc.version_line() + ")"
                               : "unavailable: " + tc.reason)
              << "\n";
  }
  core::SandboxLimits slimits;
  slimits.processes = static_cast<rlim_t>(std::max<long long>(16, num("sandbox-nproc")));
  {
    const std::string ids = get("sandbox-uid");
    const auto colon = ids.find(':');
    slimits.uid = static_cast<uid_t>(number("sandbox-uid", ids.substr(0, colon)));
    slimits.gid = colon == std::string::npos ? static_cast<gid_t>(slimits.uid)
                                             : static_cast<gid_t>(number("sandbox-uid", ids.substr(colon + 1)));
    if (slimits.uid == 0) {
      std::cerr << "kforge serve: --sandbox-uid 0 would exempt children from RLIMIT_NPROC\n";
      return 2;
    }
  }
  auto sandbox = core::Sandbox::make(get("sandbox"), toolchain_roots(toolchains), slimits);
  if (!sandbox) {
    std::cerr << "kforge serve: " << sandbox.error().message << "\n";
    return 2;
  }
  std::cerr << "kforge: sandbox " << sandbox->mode_name() << " (" << sandbox->reason() << ")\n";
  // Every compile would fail (with a compiler's "cannot open" error): say why, at start.
  if (const std::string why = sandbox->cannot_reach(store->root()); !why.empty()) {
    std::cerr << "kforge serve: " << why << "\n";
    return 2;
  }
  // A cluster member (--redis): the shared tier, build leases and the instance registry,
  // all over one Redis connection pool.
  std::unique_ptr<core::storage::Redis> redis;
  std::unique_ptr<core::storage::RedisTier> shared;
  std::unique_ptr<core::cluster::Leases> leases;
  std::unique_ptr<core::cluster::Registry> registry;
  if (const std::string redis_url = get("redis"); !redis_url.empty()) {
    auto url = core::storage::RedisUrl::parse(redis_url);
    if (!url) {
      std::cerr << "kforge serve: " << url.error().message << "\n";
      return 2;
    }
    redis = std::make_unique<core::storage::Redis>(core::storage::Redis::Options{*url});
    shared = std::make_unique<core::storage::RedisTier>(*redis, num("redis-max-blob"),
                                                        [&store] { return store->now_seconds(); });
    registry = std::make_unique<core::cluster::Registry>(*redis, cfg.instance);
    leases = std::make_unique<core::cluster::Leases>(*redis, cfg.instance, registry.get());
    std::cerr << "kforge: shared tier " << url->redacted() << " as instance " << cfg.instance
              << (redis->probe() ? " (up)" : " (down: serving from the local tier until it answers)") << "\n";
  }
  bcfg.instance = cfg.instance;
  bcfg.lease_ttl = std::chrono::seconds(std::max<long long>(2, num("redis-lease-ttl")));
  core::storage::Storage storage(*store, shared.get());
  core::Builder builder(toolchains, storage, bcfg, sandbox->spawner());
  builder.set_leases(leases.get());
  const std::string runner_setting = get("runner-dir");
  const fs::path runner_dir =
      runner_setting.empty() ? core::executable_dir() : fs::path(runner_setting);
  // The cpu vendor baseline runs at each kernel's target ISA (core::vendor_env), whatever
  // OPENBLAS_CORETYPE the service inherited: a baseline at another ISA is not a comparison.
  std::vector<std::string> runner_env;
  core::Bencher bencher(runner_dir, *store, std::chrono::seconds(num("bench-timeout")), runner_env,
                        sandbox->spawner());
  for (core::Backend b : core::kAllBackends) {
    const auto d = bencher.devices()[std::string(core::backend_name(b))];
    std::cerr << "kforge: " << core::backend_name(b) << " device: "
              << (d.value("available", false) ? d.value("name", "?")
                                              : "unavailable: " + d.value("reason", ""))
              << "\n";
  }
  api::Server server(cfg, {builder, *store, toolchains, bencher, *sandbox, auth,
                          {shared.get(), leases.get(), registry.get()}});
  if (!server.valid()) {  // OpenSSL refused what check_tls_files accepted
    const std::string why = api::openssl_errors();
    std::cerr << "kforge serve: the TLS server could not be set up from --tls-cert " << cfg.tls_cert
              << " and --tls-key " << cfg.tls_key << (why.empty() ? "" : ": " + why) << "\n";
    return 2;
  }
  auto port = server.bind();
  if (!port) {
    std::cerr << "kforge: " << port.error().message << "\n";
    return 1;
  }
  const std::string url =
      std::string(server.tls() ? "https" : "http") + "://" + cfg.host + ":" + std::to_string(*port);
  server.set_advertise_url(get("advertise-url").empty() ? url : get("advertise-url"));
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
  std::cout
      << "listening on " << url << "\n"
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

int cache(const Args& a) {
  const std::string what = a.positional.empty() ? "" : a.positional[0];
  if (what != "stats" && what != "gc" && what != "verify" && what != "export" && what != "import") {
    std::cerr << "kforge cache: expected stats, gc, verify, export or import\n";
    return 2;
  }
  // export -o FILE / import FILE (parse_args leaves "-o" among the positionals)
  std::string archive;
  if (what == "export") {
    const auto o = std::find(a.positional.begin(), a.positional.end(), "-o");
    archive = o != a.positional.end() && o + 1 != a.positional.end() ? *(o + 1) : setting(a, "out", "");
    if (archive.empty()) {
      std::cerr << "kforge cache export: -o FILE is required (- for stdout)\n";
      return 2;
    }
  } else if (what == "import") {
    if (a.positional.size() != 2) {
      std::cerr << "kforge cache import: expected one FILE\n";
      return 2;
    }
    archive = a.positional[1];
  }
  core::storage::ExportOptions export_opts;
  export_opts.kforge_version = KFORGE_VERSION;
  if (auto it = a.flags.find("since"); it != a.flags.end()) {
    auto since = core::storage::parse_since(it->second, "--since");
    if (!since) {
      std::cerr << "kforge cache export: --" << since.error().message << "\n";
      return 2;
    }
    export_opts.since = *since;
  }
  if (auto it = a.flags.find("match"); it != a.flags.end()) {
    std::istringstream in(it->second);
    for (std::string m; std::getline(in, m);) {
      auto match = core::storage::parse_match(m, "--match");
      if (!match) {
        std::cerr << "kforge cache export: --" << match.error().message << "\n";
        return 2;
      }
      export_opts.matches.push_back(*match);
    }
  }
  const std::string dir_setting = setting(a, "cache-dir", "");
  std::unique_ptr<core::storage::DiskTier> store;
  try {
    store = std::make_unique<core::storage::DiskTier>(
        fs::absolute(fs::path(dir_setting.empty() ? default_cache_dir() : dir_setting)));
  } catch (const std::exception& e) {
    std::cerr << "kforge cache: " << e.what() << "\n";
    return 1;
  }
  nlohmann::json out = {{"cache_dir", store->root().string()}};
  if (what == "gc") {
    const auto g = store->collect_garbage();
    out["removed"] = {{"expired_negative_entries", g.expired},
                      {"dangling_requests", g.dangling_requests},
                      {"dangling_family_links", g.dangling_family_links},
                      {"dead_staging_items", g.staging_items}};
    if (auto it = a.flags.find("max-bytes"); it != a.flags.end()) {
      const auto r = store->evict(number("max-bytes", it->second));
      out["evicted"] = {
          {"entries", r.evicted}, {"bytes", r.freed_bytes}, {"kept_in_use", r.kept_pinned}};
    }
  } else if (what == "verify") {
    const auto r = store->verify_all();
    out["checked"] = r.checked;
    out["removed"] = r.removed;
  } else if (what == "export") {
    const auto t0 = std::chrono::steady_clock::now();
    auto snap = core::storage::ExportSnapshot::take(*store, export_opts);
    auto bytes = !snap ? core::Result<uint64_t>(std::unexpected(snap.error()))
                 : archive == "-"
                     ? (*snap)->write([](const char* d, size_t n) { return std::fwrite(d, 1, n, stdout) == n; })
                     : (*snap)->write_file(archive);
    if (!bytes) {
      std::cerr << "kforge cache export: " << bytes.error().message << "\n";
      return 1;
    }
    std::fflush(stdout);
    out["archive"] = archive;
    out["entries"] = (*snap)->entries();
    out["requests"] = (*snap)->requests();
    out["bytes"] = *bytes;
    out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } else if (what == "import") {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = core::storage::import_archive(*store, archive);
    if (!r) {
      std::cerr << "kforge cache import: " << r.error().message << "\n";
      out.update(r.error().extra);
      out["stats"] = store->stats().to_json();
      std::cout << out.dump(2) << "\n";
      return 1;
    }
    out.update(r->to_json());
    out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  out["stats"] = store->stats().to_json();
  (archive == "-" ? std::cerr : std::cout) << out.dump(2) << "\n";
  return what == "verify" && !out["removed"].empty() ? 1 : 0;
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
  if (args->flags.contains("help") && cmd != "serve") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "serve") return serve(*args);
  if (cmd == "submit") return submit(*args);
  if (cmd == "toolchains") return toolchains(*args);
  if (cmd == "explain") return explain(*args);
  if (cmd == "prefetch") return prefetch(*args);
  if (cmd == "cache") return cache(*args);
  std::cerr << "kforge: unknown command `" << cmd << "`\n" << kUsage;
  return 2;
}
