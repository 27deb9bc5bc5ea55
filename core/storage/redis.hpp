// A connection to Redis for kforge's shared tier and its cluster coordination
// (`kforge serve --redis redis://[:password@]HOST:PORT[/DB]`): the URL, a small pool of
// connections, and the fault model every user of it shares.
//
// Faults: every command has a timeout; a failed connection marks Redis down and later
// commands answer nullopt at once until a reconnect (exponential backoff, 0.1 s to 5 s)
// succeeds. Its users treat that as "not there": the shared tier as a miss, a lease as
// granted (each instance builds for itself), the registry as empty. A dead Redis costs
// local compiles, never a failed request.
//
// Keys are `kforge:v1:<kind>:<id>`; the kinds are listed where they are used
// (core/storage/redis_tier.hpp, core/cluster/lease.hpp, core/cluster/registry.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"

struct redisContext;

namespace kforge::core::storage {

struct RedisUrl {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string password;
  // redis://[[user]:password@]host[:port][/db]; an IPv6 host in brackets; rediss:// (TLS) is
  // refused with the reason.
  static Result<RedisUrl> parse(std::string_view url);
  std::string redacted() const;  // for logs: the password is never printed
};

class Redis {
 public:
  struct Options {
    RedisUrl url;
    std::chrono::milliseconds timeout{2000};
  };
  // A reply, owned (binary-safe strings).
  struct Reply {
    int type = 0;
    std::string str;  // STRING, STATUS, ERROR
    long long integer = 0;
    std::vector<Reply> elements;
    bool nil() const;
    bool ok() const;
  };

  explicit Redis(Options o);
  ~Redis();
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  // Runs one command (argv form) on a pooled connection; nullopt when Redis is down (within
  // the backoff) or the command could not be sent (Redis is then marked down).
  std::optional<Reply> command(const std::vector<std::string>& argv);
  // Pings Redis now (unless within the reconnect backoff): whether it answers.
  bool probe();
  bool up() const { return up_.load(); }
  uint64_t errors() const { return errors_.load(); }
  std::string last_error() const;
  const RedisUrl& url() const { return o_.url; }
  // "kforge:v1:<kind>:<id>"
  static std::string key(std::string_view kind, std::string_view id);

 private:
  redisContext* connect();
  void mark_down(const std::string& why);

  Options o_;
  mutable std::mutex mu_;
  std::vector<redisContext*> pool_;
  std::atomic<bool> up_{true};  // until the first failure: a start with Redis down shows at the first use
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{100};
  std::string last_error_;
  std::atomic<uint64_t> errors_{0};
};

}  // namespace kforge::core::storage
