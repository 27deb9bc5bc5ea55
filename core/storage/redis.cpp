#include "core/storage/redis.hpp"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cctype>

#include "core/base/log.hpp"

namespace kforge::core::storage {
namespace {

using Clock = std::chrono::steady_clock;

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

Redis::Reply reply_of(const redisReply* r) {
  Redis::Reply out;
  out.type = r->type;
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
    out.str.assign(r->str, r->len);
  if (r->type == REDIS_REPLY_INTEGER) out.integer = r->integer;
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) out.elements.push_back(reply_of(r->element[i]));
  return out;
}

}  // namespace

bool Redis::Reply::nil() const { return type == REDIS_REPLY_NIL; }
bool Redis::Reply::ok() const { return type != REDIS_REPLY_ERROR; }

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

Redis::Redis(Options o) : o_(std::move(o)) {}

Redis::~Redis() {
  for (redisContext* c : pool_) redisFree(c);
}

std::string Redis::key(std::string_view kind, std::string_view id) {
  return "kforge:v1:" + std::string(kind) + ":" + std::string(id);
}

std::string Redis::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

redisContext* Redis::connect() {
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

void Redis::mark_down(const std::string& why) {
  std::lock_guard lock(mu_);
  if (up_.exchange(false)) {
    log::warn("redis", "redis " + o_.url.redacted() + " down: " + why).str("redis", o_.url.redacted()).str("state", "down");
  }
  last_error_ = why;
  retry_at_ = Clock::now() + backoff_;
  backoff_ = std::min<std::chrono::milliseconds>(backoff_ * 2, std::chrono::seconds(5));
  errors_++;
}

std::optional<Redis::Reply> Redis::command(const std::vector<std::string>& argv) {
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
  Reply out = reply_of(r);
  freeReplyObject(r);
  std::lock_guard lock(mu_);
  if (!up_.exchange(true)) log::info("redis", "redis " + o_.url.redacted() + " up").str("redis", o_.url.redacted()).str("state", "up");
  backoff_ = std::chrono::milliseconds(100);
  if (pool_.size() < 16) pool_.push_back(c);
  else redisFree(c);
  return out;
}

bool Redis::probe() {
  auto r = command({"PING"});
  return r && r->ok();
}

}  // namespace kforge::core::storage
