#include "service/serve_config.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <CLI/CLI.hpp>

#include "api/tls.hpp"
#include "core/base/fsutil.hpp"
#include "service/config_file.hpp"

namespace kforge::cli {
namespace {

constexpr SettingSpec kSettings[] = {
    {"config", "", "a file of `name = value` lines for any setting below"},
    {"host", "127.0.0.1", "address to bind; one that is not loopback needs --token-file (or --insecure-public)"},
    {"insecure-public", "", "allow a --host that is not loopback without --token-file: anyone who reaches it may "
                            "compile and run code here",
     true},
    {"port", "8080", "port; 0 picks a free one"},
    {"cache-dir", "", "cache root [$XDG_CACHE_HOME/kforge, or ~/.cache/kforge]"},
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
    {"log-format", "auto", "json | text | auto: the log's format on stderr (auto: text on a terminal, else json)"},
    {"log-level", "info", "debug | info | warn | error: the least severe records logged"},
};

std::string env_name(std::string_view setting) {
  std::string env = "KFORGE_";
  for (char c : setting) env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return env;
}

const SettingSpec* find_setting(std::string_view name) {
  for (const auto& s : kSettings) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

}  // namespace

const std::span<const SettingSpec> kServeSettings = kSettings;

void ServeSettings::declare(CLI::App& command) {
  for (const auto& s : kSettings) {
    const std::string name = s.name;
    CLI::Option* o = s.is_flag ? command.add_flag("--" + name, given_[name], s.help)
                               : command.add_option("--" + name, given_[name], s.help)->type_name(name == "config" ? "FILE" : "V");
    o->envname(env_name(name))->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if (*s.fallback) o->default_str(s.fallback);
    // --library may be given more than once: the values are one list, joined with commas.
    if (name == "library") o->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::Join);
    options_[name] = o;
  }
}

std::expected<void, std::string> ServeSettings::read_config_file() {
  const std::string file = get("config");
  if (file.empty()) return {};
  auto text = core::read_file(file);
  if (!text) return std::unexpected("cannot read the config file " + file + ": " + text.error().message);
  auto lines = parse_config(*text, [](std::string_view name) { return name != "config" && find_setting(name); });
  if (!lines) return std::unexpected(file + ":" + std::to_string(lines.error().line) + ": " + lines.error().message);
  for (auto& l : *lines) {
    if (options_.at(l.name)->count() == 0) from_file_[l.name] = std::move(l.value);
  }
  return {};
}

std::string ServeSettings::get(const std::string& name) const {
  if (auto o = options_.find(name); o != options_.end() && o->second->count() > 0) return given_.at(name);
  if (auto f = from_file_.find(name); f != from_file_.end()) return f->second;
  const SettingSpec* s = find_setting(name);
  return s ? s->fallback : "";
}

std::expected<uint64_t, std::string> parse_count(const std::string& name, const std::string& value) {
  try {
    size_t used = 0;
    const long long n = std::stoll(value, &used);
    if (used == value.size() && n >= 0) return static_cast<uint64_t>(n);
  } catch (...) {
  }
  return std::unexpected("--" + name + " must be a non-negative integer, got `" + value + "`");
}

std::expected<std::string, std::string> default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return std::string(x) + "/kforge";
  std::string home;
  if (const char* h = std::getenv("HOME"); h && *h == '/') {
    home = h;
  } else if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir && *pw->pw_dir == '/') {
    home = pw->pw_dir;
  } else {
    return std::unexpected("no --cache-dir, and no home directory for ~/.cache/kforge (HOME and XDG_CACHE_HOME are unset)");
  }
  while (home.size() > 1 && home.ends_with('/')) home.pop_back();
  return (home == "/" ? "" : home) + "/.cache/kforge";
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.starts_with("127.");
}

namespace {

std::optional<bool> parse_bool(const std::string& v) {
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  return std::nullopt;
}

}  // namespace

std::expected<ServeConfig, std::string> make_serve_config(const ServeSettings& s, bool stderr_is_terminal) {
  std::string error;
  auto num = [&](const char* name) -> uint64_t {
    auto n = parse_count(name, s.get(name));
    if (!n && error.empty()) error = n.error();
    return n.value_or(0);
  };
  ServeConfig c;
  api::ServerConfig& cfg = c.server;
  cfg.host = s.get("host");
  cfg.port = static_cast<int>(num("port"));
  cfg.max_body_bytes = num("max-body");
  cfg.max_import_bytes = num("max-import-bytes");
  cfg.max_json_depth = num("max-json-depth");
  cfg.limits.max_source_bytes = num("max-source");
  cfg.limits.max_archs = cfg.limits.max_inputs = cfg.limits.max_epilogue = num("max-list");
  cfg.max_choices = num("max-choices");
  cfg.max_prefetch = num("max-prefetch");
  if (!s.get("compile-jobs").empty()) cfg.compile_jobs = std::max<uint64_t>(1, num("compile-jobs"));
  cfg.max_queue = num("max-queue");
  cfg.job_history = num("job-history");
  cfg.request_deadline = std::chrono::seconds(num("request-deadline"));
  cfg.read_timeout_s = static_cast<int>(num("read-timeout"));
  cfg.header_timeout_s = static_cast<int>(std::max<uint64_t>(1, num("header-timeout")));
  cfg.body_timeout_s = static_cast<int>(std::max<uint64_t>(1, num("body-timeout")));
  cfg.min_body_rate = std::max<uint64_t>(1, num("min-body-rate"));
  cfg.max_connections = num("max-connections");  // 0: resolved at start (the descriptor limit)
  cfg.max_connections_per_client = num("max-connections-per-client");
  cfg.write_timeout_s = static_cast<int>(num("write-timeout"));
  cfg.http_threads = std::max<uint64_t>(4, num("http-threads"));
  cfg.http_loops = num("http-loops");
  cfg.cache_max_bytes = num("cache-max-bytes");
  cfg.tls_cert = s.get("tls-cert");
  cfg.tls_key = s.get("tls-key");
  cfg.web_dir = s.get("web-dir");
  cfg.accel_redirect = s.get("accel-redirect");
  c.build.compile_timeout = std::chrono::seconds(num("compile-timeout"));
  c.build.output_cap = num("compile-output-cap");
  c.build.negative_ttl = std::chrono::seconds(num("negative-ttl"));
  c.build.lease_ttl = std::chrono::seconds(std::max<uint64_t>(2, num("redis-lease-ttl")));
  c.redis_max_blob = num("redis-max-blob");
  c.bench_timeout = std::chrono::seconds(num("bench-timeout"));
  c.sandbox_limits.processes = static_cast<rlim_t>(std::max<uint64_t>(16, num("sandbox-nproc")));
  if (!error.empty()) return std::unexpected(error);

  while (cfg.accel_redirect.ends_with('/')) cfg.accel_redirect.pop_back();
  if (!cfg.accel_redirect.empty() && !cfg.accel_redirect.starts_with('/'))
    return std::unexpected("--accel-redirect is a URI prefix such as /kforge-cache");
  if (!s.get("redis").empty() || !s.get("instance-id").empty()) {  // a cluster member has an id
    cfg.instance = s.get("instance-id");
    if (cfg.instance.empty()) {  // the host name's letters and digits, and the port (or pid)
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      for (char* ch = host; *ch && cfg.instance.size() < 20; ++ch)
        if (std::isalnum(static_cast<unsigned char>(*ch))) cfg.instance += static_cast<char>(std::tolower(*ch));
      cfg.instance += cfg.port ? "p" + std::to_string(cfg.port) : "x" + std::to_string(::getpid());
    }
    const bool ok = cfg.instance.size() <= 32 &&
                    cfg.instance.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") == std::string::npos;
    if (!ok) return std::unexpected("--instance-id is 1 to 32 of [a-z0-9]");
  }
  c.build.instance = cfg.instance;
  if (cfg.tls_cert.empty() != cfg.tls_key.empty()) return std::unexpected("--tls-cert and --tls-key go together");
  {
    const std::string ids = s.get("sandbox-uid");
    const auto colon = ids.find(':');
    auto uid = parse_count("sandbox-uid", ids.substr(0, colon));
    auto gid = colon == std::string::npos ? uid : parse_count("sandbox-uid", ids.substr(colon + 1));
    if (!uid) return std::unexpected(uid.error());
    if (!gid) return std::unexpected(gid.error());
    c.sandbox_limits.uid = static_cast<uid_t>(*uid);
    c.sandbox_limits.gid = static_cast<gid_t>(*gid);
    if (c.sandbox_limits.uid == 0) return std::unexpected("--sandbox-uid 0 would exempt children from RLIMIT_NPROC");
  }
  if (const std::string redis = s.get("redis"); !redis.empty()) {
    auto url = core::storage::RedisUrl::parse(redis);
    if (!url) return std::unexpected(url.error().message);
    c.redis = *url;
  }
  if (const std::string f = s.get("log-format"); f != "auto") {
    auto format = core::log::parse_format(f);
    if (!format) return std::unexpected("--log-format is json, text or auto, not `" + f + "`");
    c.log_format = *format;
  } else {
    c.log_format = stderr_is_terminal ? core::log::Format::kText : core::log::Format::kJson;
  }
  auto level = core::log::parse_level(s.get("log-level"));
  if (!level) return std::unexpected("--log-level is debug, info, warn or error, not `" + s.get("log-level") + "`");
  c.log_level = *level;

  if (const std::string dir = s.get("cache-dir"); !dir.empty()) {
    c.cache_dir = dir;
  } else {
    auto fallback = default_cache_dir();
    if (!fallback) return std::unexpected(fallback.error());
    c.cache_dir = *fallback;
  }
  c.sandbox_mode = s.get("sandbox");
  c.runner_dir = s.get("runner-dir");
  c.advertise_url = s.get("advertise-url");

  // The files the settings name, read now: a wrong one stops kforge before it starts anything.
  const auto insecure_public = parse_bool(s.get("insecure-public"));
  if (!insecure_public)
    return std::unexpected("--insecure-public is true or false (1 or 0), not `" + s.get("insecure-public") + "`");
  c.token_file = s.get("token-file");
  if (!c.token_file.empty()) {
    auto loaded = api::Auth::load(c.token_file);
    if (!loaded) {
      const auto& e = loaded.error();
      return std::unexpected(e.fields.empty() ? e.message : e.fields[0].field + ": " + e.fields[0].message);
    }
    c.auth = std::move(*loaded);
  } else if (!is_loopback(cfg.host)) {
    if (!*insecure_public) {
      return std::unexpected("--host " + cfg.host +
                             " is not a loopback address, and without --token-file anyone who reaches it could "
                             "compile and run code on this host: give --token-file FILE (docs/SECURITY.md), or "
                             "--insecure-public to serve it open");
    }
    c.open_to_all = true;
  }
  if (!cfg.tls_cert.empty()) {
    // Checked before anything starts: a certificate that has expired, is not valid yet or is
    // not the key's is refused here, not at every client's handshake.
    auto tls = api::check_tls_files(cfg.tls_cert, cfg.tls_key);
    if (!tls) return std::unexpected(tls.error().message);
    c.tls = *tls;
  }
  const std::string specs = s.get("library");
  for (size_t b = 0; b < specs.size();) {
    size_t e = specs.find(',', b);
    if (e == std::string::npos) e = specs.size();
    if (e > b) {
      auto lib = core::load_library(std::string_view(specs).substr(b, e - b));
      if (!lib) return std::unexpected(lib.error().message);
      if (std::any_of(c.libraries.begin(), c.libraries.end(), [&](const auto& l) { return l.name == lib->name; }))
        return std::unexpected("--library " + lib->name + " is given twice");
      c.libraries.push_back(std::move(*lib));
    }
    b = e + 1;
  }
  return c;
}

}  // namespace kforge::cli
