#include "core/remote_tier.hpp"

#include <hiredis/hiredis.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <random>

#include "core/fsutil.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "core/store.hpp"

namespace kforge::core {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// One command in argv form (binary-safe); the reply (owned by the caller) or null.
redisReply* run_argv(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> p;
  std::vector<size_t> n;
  for (const auto& a : argv) {
    p.push_back(a.data());
    n.push_back(a.size());
  }
  return static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), p.data(), n.data()));
}

}  // namespace

struct RedisTier::Reply {
  int type = REDIS_REPLY_NIL;
  std::string str;  // STRING, STATUS, ERROR
  long long integer = 0;
  std::vector<Reply> elements;
  bool nil() const { return type == REDIS_REPLY_NIL; }
  bool ok() const { return type != REDIS_REPLY_ERROR; }

  static Reply from(const redisReply* r) {
    Reply out;
    out.type = r->type;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
      out.str.assign(r->str, r->len);
    if (r->type == REDIS_REPLY_INTEGER) out.integer = r->integer;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) out.elements.push_back(from(r->element[i]));
    return out;
  }
};

Result<RedisUrl> RedisUrl::parse(std::string_view url) {
  RedisUrl u;
  auto bad = [](const std::string& why) { return fail(ErrorKind::kBadRequest, "--redis: " + why); };
  if (url.starts_with("rediss://"))
    return bad("TLS (rediss://) needs hiredis 1.x; this build has hiredis 0.14 — reach a TLS Redis through a local "
               "TLS tunnel (stunnel) instead");
  if (!url.starts_with("redis://")) return bad("wants redis://[:password@]host[:port][/db]");
  std::string_view rest = url.substr(8);
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {  // the password may hold '@'
    const std::string_view auth = rest.substr(0, at);
    const size_t colon = auth.find(':');
    u.password = std::string(colon == std::string_view::npos ? auth : auth.substr(colon + 1));
    rest = rest.substr(at + 1);
  }
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      if (db.size() > 4 || db.find_first_not_of("0123456789") != std::string_view::npos)
        return bad("the database is a number (redis://host:port/0)");
      u.db = std::stoi(std::string(db));
    }
  }
  std::string_view host = rest, port;
  bool has_port = false;
  if (rest.starts_with('[')) {  // an IPv6 address: [::1]:6379
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("an IPv6 address ends with ]");
    host = rest.substr(1, close - 1);
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty() && after.front() != ':') return bad("expected :port after the IPv6 address");
    has_port = !after.empty();
    if (has_port) port = after.substr(1);
    if (host.find(':') == std::string_view::npos || host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos)
      return bad("an address in brackets is an IPv6 address: hex digits, : and .");
  } else {
    const size_t colon = rest.find(':');
    if (colon != std::string_view::npos) {
      if (rest.find(':', colon + 1) != std::string_view::npos) return bad("an IPv6 address goes in brackets: [::1]");
      host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
      has_port = true;
    }
    const bool name = std::all_of(host.begin(), host.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
    });
    if (!name) return bad("the host is a name or an address (letters, digits, '.', '-', '_')");
  }
  if (has_port) {
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
        std::stoi(std::string(port)) < 1 || std::stoi(std::string(port)) > 65535)
      return bad("the port is a number from 1 to 65535");
    u.port = std::stoi(std::string(port));
  }
  if (!host.empty()) u.host = std::string(host);
  return u;
}

std::string RedisUrl::redacted() const {
  const std::string h = host.find(':') == std::string::npos ? host : "[" + host + "]";
  return "redis://" + std::string(password.empty() ? "" : ":***@") + h + ":" + std::to_string(port) + "/" +
         std::to_string(db);
}

RedisTier::RedisTier(Options o) : o_(std::move(o)) {
  // The first use connects; until then the tier counts as up, so a start with Redis down
  // shows as down at the first request (and in /readyz once probed).
  up_ = true;
}

RedisTier::~RedisTier() {
  for (redisContext* c : pool_) redisFree(c);
}

std::string RedisTier::k(std::string_view kind, std::string_view id) const {
  return "kforge:v1:" + std::string(kind) + ":" + std::string(id);
}

std::string RedisTier::owner_token() const {
  static const std::string nonce = [] {
    std::random_device rd;
    return std::to_string(rd()) + std::to_string(rd());
  }();
  return o_.instance + ":" + std::to_string(::getpid()) + ":" + nonce;
}

void RedisTier::count(uint64_t RemoteCounters::*field) {
  std::lock_guard lock(counters_mu_);
  ++(counters_.*field);
}

RemoteCounters RedisTier::counters() const {
  std::lock_guard lock(counters_mu_);
  return counters_;
}

redisContext* RedisTier::connect() {
  timeval tv{static_cast<time_t>(o_.timeout.count() / 1000), static_cast<suseconds_t>(o_.timeout.count() % 1000 * 1000)};
  redisContext* c = redisConnectWithTimeout(o_.url.host.c_str(), o_.url.port, tv);
  if (!c || c->err) {
    mark_down(c ? c->errstr : "cannot allocate a connection");
    if (c) redisFree(c);
    return nullptr;
  }
  redisSetTimeout(c, tv);
  auto setup = [&](const std::vector<std::string>& argv) {
    redisReply* r = run_argv(c, argv);
    const bool ok = r && r->type != REDIS_REPLY_ERROR;
    std::string why = r && r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : (c->err ? c->errstr : "");
    if (r) freeReplyObject(r);
    if (!ok) mark_down(argv[0] + ": " + why);
    return ok;
  };
  if ((!o_.url.password.empty() && !setup({"AUTH", o_.url.password})) ||
      (o_.url.db != 0 && !setup({"SELECT", std::to_string(o_.url.db)}))) {
    redisFree(c);
    return nullptr;
  }
  return c;
}

void RedisTier::mark_down(const std::string& why) {
  std::lock_guard lock(mu_);
  if (up_.exchange(false)) {
    log::warn("redis", "redis " + o_.url.redacted() + " down: " + why).str("redis", o_.url.redacted()).str("state", "down");
  }
  last_error_ = why;
  retry_at_ = Clock::now() + backoff_;
  backoff_ = std::min<std::chrono::milliseconds>(backoff_ * 2, std::chrono::seconds(5));
  count(&RemoteCounters::errors);
}

std::optional<RedisTier::Reply> RedisTier::command(const std::vector<std::string>& argv) {
  redisContext* c = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!up_ && Clock::now() < retry_at_) return std::nullopt;  // down: fail fast until the backoff ends
    if (!pool_.empty()) {
      c = pool_.back();
      pool_.pop_back();
    }
  }
  if (!c && !(c = connect())) return std::nullopt;
  redisReply* r = run_argv(c, argv);
  if (!r) {
    mark_down(c->errstr);
    redisFree(c);
    return std::nullopt;
  }
  Reply out = Reply::from(r);
  freeReplyObject(r);
  std::lock_guard lock(mu_);
  if (!up_.exchange(true)) log::info("redis", "redis " + o_.url.redacted() + " up").str("redis", o_.url.redacted()).str("state", "up");
  backoff_ = std::chrono::milliseconds(100);
  if (pool_.size() < 16) pool_.push_back(c);
  else redisFree(c);
  return out;
}

std::optional<nlohmann::json> RedisTier::fetch(const std::string& key, DiskStore& store, bool polling) {
  auto m = command({"GET", k("manifest", key)});
  if (!m || !m->ok() || m->nil()) {
    if (m && !polling) count(&RemoteCounters::misses);
    return std::nullopt;
  }
  nlohmann::json manifest = nlohmann::json::parse(m->str, nullptr, false);
  if (manifest.is_discarded() || manifest.value("key", "") != key || !manifest.contains("files") ||
      !manifest["files"].is_object()) {
    count(&RemoteCounters::corrupt);
    command({"DEL", k("manifest", key)});
    return std::nullopt;
  }
  auto staging = store.make_staging();
  if (!staging) return std::nullopt;
  RemoveOnExit cleanup{*staging};  // unless published (renamed away)
  for (const auto& [name, f] : manifest["files"].items()) {
    const std::string sha = f.value("sha256", "");
    const fs::path dest = (*staging / name).lexically_normal();
    if (!is_hex_key(sha) || !dest.string().starts_with(staging->string() + "/")) {
      count(&RemoteCounters::corrupt);
      return std::nullopt;
    }
    auto blob = command({"GET", k("blob", sha)});
    if (!blob || !blob->ok() || blob->nil()) {  // evicted since: a miss
      if (blob) count(&RemoteCounters::misses);
      return std::nullopt;
    }
    if (sha256_hex(blob->str) != sha || blob->str.size() != f.value("bytes", uint64_t{0})) {
      log::error("redis_corrupt", "redis blob " + sha + " of " + key + " is corrupt; deleted, not used")
          .str("blob", sha)
          .str("key", key);
      count(&RemoteCounters::corrupt);
      command({"DEL", k("blob", sha)});
      return std::nullopt;
    }
    fs::create_directories(dest.parent_path());
    if (!write_file(dest, blob->str)) return std::nullopt;
  }
  auto published = store.publish(*staging, key, manifest);
  if (!published) return std::nullopt;
  count(&RemoteCounters::hits);
  return *published;
}

void RedisTier::share(const nlohmann::json& manifest, DiskStore& store) {
  const std::string key = manifest.value("key", "");
  const fs::path dir = store.entry_dir(key);
  for (const auto& [name, f] : manifest["files"].items()) {
    if (f.value("bytes", uint64_t{0}) > o_.max_blob) {
      count(&RemoteCounters::too_big);
      return;  // not shared: other instances build it themselves
    }
  }
  for (const auto& [name, f] : manifest["files"].items()) {  // blobs first, then the manifest
    auto bytes = read_file(dir / name);
    if (!bytes) return;
    auto r = command({"SET", k("blob", f.value("sha256", "")), *bytes, "NX"});
    if (!r || !r->ok()) return;
  }
  std::vector<std::string> set = {"SET", k("manifest", key), manifest.dump()};
  if (manifest.contains("expires_at")) {  // a cached compile error lives as long there as here
    const int64_t left_s = manifest["expires_at"].get<int64_t>() - store.now_seconds();
    if (left_s <= 0) return;
    set.insert(set.end(), {"PX", std::to_string(left_s * 1000)});
  }
  if (auto r = command(set); r && r->ok()) count(&RemoteCounters::puts);
}

std::optional<std::string> RedisTier::get_request(const std::string& rkey) {
  auto r = command({"GET", k("request", rkey)});
  if (!r || !r->ok() || r->nil() || !is_hex_key(r->str)) return std::nullopt;
  return r->str;
}

void RedisTier::put_request(const std::string& rkey, const std::string& key) {
  command({"SET", k("request", rkey), key});
}

std::optional<nlohmann::json> RedisTier::get_autotune(const std::string& akey) {
  auto r = command({"GET", k("autotune", akey)});
  if (!r || !r->ok() || r->nil()) return std::nullopt;
  auto j = nlohmann::json::parse(r->str, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("autotune_key", "") != akey) return std::nullopt;
  return j;
}

void RedisTier::put_autotune(const std::string& akey, const nlohmann::json& ranking) {
  command({"SET", k("autotune", akey), ranking.dump()});
}

bool RedisTier::acquire(const std::string& key, std::chrono::milliseconds ttl) {
  auto r = command({"SET", k("lease", key), owner_token(), "NX", "PX", std::to_string(ttl.count())});
  if (!r) return true;  // Redis down: no one coordinates, build here
  return r->ok() && !r->nil();
}

void RedisTier::renew(const std::string& key, std::chrono::milliseconds ttl) {
  static const std::string kRenew =
      "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
  command({"EVAL", kRenew, "1", k("lease", key), owner_token(), std::to_string(ttl.count())});
}

void RedisTier::release(const std::string& key) {
  static const std::string kRelease =
      "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
  command({"EVAL", kRelease, "1", k("lease", key), owner_token()});
}

bool RedisTier::leased(const std::string& key) {
  auto r = command({"EXISTS", k("lease", key)});
  return r && r->ok() && r->integer > 0;
}

void RedisTier::heartbeat(const nlohmann::json& status, std::chrono::milliseconds ttl) {
  command({"SET", k("instance", o_.instance), status.dump(), "PX", std::to_string(ttl.count())});
}

nlohmann::json RedisTier::instances() {
  nlohmann::json out = nlohmann::json::array();
  std::string cursor = "0";
  do {
    auto r = command({"SCAN", cursor, "MATCH", k("instance", "*"), "COUNT", "100"});
    if (!r || !r->ok() || r->elements.size() != 2) return out;
    cursor = r->elements[0].str;
    for (const auto& key : r->elements[1].elements) {
      auto v = command({"GET", key.str});
      if (!v || v->nil()) continue;
      auto j = nlohmann::json::parse(v->str, nullptr, false);
      if (!j.is_discarded()) out.push_back(std::move(j));
    }
  } while (cursor != "0");
  return out;
}

bool RedisTier::probe() {
  auto r = command({"PING"});
  return r && r->ok();
}

nlohmann::json RedisTier::to_json() const {
  const RemoteCounters c = counters();
  std::string last;
  {
    std::lock_guard lock(mu_);
    last = last_error_;
  }
  return {{"url", o_.url.redacted()}, {"up", up()}, {"instance", o_.instance}, {"max_blob", o_.max_blob},
          {"last_error", last},
          {"counters", {{"hits", c.hits}, {"misses", c.misses}, {"puts", c.puts}, {"errors", c.errors},
                        {"corrupt", c.corrupt}, {"too_big", c.too_big}, {"lease_waits", c.lease_waits},
                        {"lease_takeovers", c.lease_takeovers}}}};
}

}  // namespace kforge::core
