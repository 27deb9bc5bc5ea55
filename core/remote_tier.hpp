// The shared (second) cache tier: several kforge instances, on several hosts, act as one
// cache through Redis (`kforge serve --redis redis://[:password@]HOST:PORT[/DB]`). The
// local DiskStore stays the first tier; the Builder asks this one on a local miss and
// publishes to both.
//
// What is shared, as Redis keys under `kforge:v1:`:
//   blob:<sha256>       a file's bytes, by content (verified on the way in and out)
//   manifest:<key>      an entry's manifest (its "files" name every blob by sha256);
//                       negative entries carry a TTL (their expires_at)
//   request:<rkey>      the request-key memo: the kernel key a request resolves to
//   lease:<key>         who builds <key> now (SET NX PX, renewed while building)
//   autotune:<akey>     an autotune ranking (its winner), for instances with the same device
//   instance:<id>       each instance's heartbeat and status (expires when it stops)
// Write order: every blob of an entry, then its manifest, so a reader that sees a manifest
// finds its blobs — unless Redis evicted one since, which the reader sees as a miss (a blob
// is checked against its sha256 and size before use; a corrupt one is deleted, never used).
// Eviction is Redis's own (maxmemory + allkeys-lru, see docs/SCALING.md).
//
// Faults: every operation has a timeout; a failed connection marks the tier down and later
// operations answer "unavailable" at once until a reconnect (exponential backoff, 0.1 s to
// 5 s) succeeds. The Builder treats unavailable as a miss, so a dead Redis costs local
// compiles, never a failed request.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

struct redisContext;

namespace kforge::core {

class DiskStore;

struct RedisUrl {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string password;
  // redis://[[user]:password@]host[:port][/db]; rediss:// (TLS) is refused with the reason.
  static Result<RedisUrl> parse(std::string_view url);
  std::string redacted() const;  // for logs: the password is never printed
};

struct RemoteCounters {
  uint64_t hits = 0, misses = 0, puts = 0, errors = 0, corrupt = 0, too_big = 0;
  uint64_t lease_waits = 0, lease_takeovers = 0;
};

class RedisTier {
 public:
  struct Options {
    RedisUrl url;
    std::string instance;                 // this instance's id (leases, registry)
    uint64_t max_blob = 64ull << 20;      // larger files are not shared
    std::chrono::milliseconds timeout{2000};
  };
  explicit RedisTier(Options o);
  ~RedisTier();
  RedisTier(const RedisTier&) = delete;
  RedisTier& operator=(const RedisTier&) = delete;

  // Copies entry `key` from Redis into `store` (verifying every blob) and returns the
  // published manifest; nullopt on a miss, a missing or corrupt blob, or Redis down.
  // `polling`: a waiter asking again for a build another instance runs; its absence is
  // not counted as a miss.
  std::optional<nlohmann::json> fetch(const std::string& key, DiskStore& store, bool polling = false);
  // Shares the published entry `manifest` (its files read from store.entry_dir(key)).
  void share(const nlohmann::json& manifest, DiskStore& store);
  std::optional<std::string> get_request(const std::string& rkey);
  void put_request(const std::string& rkey, const std::string& key);

  // Autotune rankings (by autotune key, which covers the device): a measured winner is
  // shared with every instance that has the same device.
  std::optional<nlohmann::json> get_autotune(const std::string& akey);
  void put_autotune(const std::string& akey, const nlohmann::json& ranking);

  // Build leases (single-flight across instances). acquire() is true when this instance
  // now holds the lease (or Redis is down: then everyone builds for itself).
  bool acquire(const std::string& key, std::chrono::milliseconds ttl);
  void renew(const std::string& key, std::chrono::milliseconds ttl);
  void release(const std::string& key);
  // Whether some instance holds the lease on `key` (false when Redis is down).
  bool leased(const std::string& key);

  // The instance registry: this instance's status (expires after `ttl` unless refreshed),
  // and every registered instance's.
  void heartbeat(const nlohmann::json& status, std::chrono::milliseconds ttl);
  nlohmann::json instances();

  // Pings Redis now (unless within the reconnect backoff): whether the tier is up.
  bool probe();
  void count_lease_wait() { count(&RemoteCounters::lease_waits); }
  void count_lease_takeover() { count(&RemoteCounters::lease_takeovers); }

  bool up() const { return up_.load(); }
  const Options& options() const { return o_; }
  RemoteCounters counters() const;
  nlohmann::json to_json() const;

 private:
  struct Reply;
  // Runs one command (argv form; binary-safe) on a pooled connection; nullopt when Redis
  // is down or the command failed (the tier is then marked down).
  std::optional<Reply> command(const std::vector<std::string>& argv);
  redisContext* connect();
  void mark_down(const std::string& why);
  void count(uint64_t RemoteCounters::*field);
  std::string k(std::string_view kind, std::string_view id) const;
  std::string owner_token() const;

  Options o_;
  mutable std::mutex mu_;
  std::vector<redisContext*> pool_;
  std::atomic<bool> up_{false};
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{100};
  std::string last_error_;
  mutable std::mutex counters_mu_;
  RemoteCounters counters_;
};

}  // namespace kforge::core
