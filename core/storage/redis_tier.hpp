// The shared tier: several kforge instances, on several hosts, act as one cache through
// Redis (core/storage/redis.hpp). A Tier (tier.hpp) behind the Storage facade, which asks
// it after a local miss and gives it every publish.
//
// What it keeps, as Redis keys (Redis::key):
//   blob:<sha256>       a file's bytes, by content (verified on the way in and out)
//   manifest:<key>      an entry's manifest (its "files" name every blob by sha256);
//                       negative entries carry a TTL (their expires_at)
//   request:<rkey>      the request-key memo: the kernel key a request resolves to
//   autotune:<akey>     an autotune ranking, for instances with the same device
//   generation          a random name set by the first instance that finds none: a Redis
//                       restarted empty (or flushed) has none, so the instances see a new
//                       generation and put back what they hold (Storage's read-repair)
// Write order: every blob of an entry, then its manifest, so a reader that sees a manifest
// finds its blobs — unless Redis evicted one since, which the reader sees as a miss (a blob
// is checked against its sha256 and size before use; a corrupt one is deleted, never used).
// Eviction is Redis's own (maxmemory + allkeys-lru, see docs/SCALING.md). A file over
// `max_blob` is not shared: other instances build that kernel themselves.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/storage/redis.hpp"
#include "core/storage/tier.hpp"

namespace kforge::core::storage {

struct RedisTierCounters {
  uint64_t hits = 0, misses = 0, puts = 0, corrupt = 0, too_big = 0;
};

class RedisTier final : public Tier {
 public:
  // `now_seconds` gives the wall clock a negative entry's remaining lifetime is taken from.
  RedisTier(Redis& redis, uint64_t max_blob, std::function<int64_t()> now_seconds);

  const char* name() const override { return "redis"; }
  std::optional<Entry> get(const std::string& key, bool polling = false) override;
  bool put(const Entry& entry) override;
  bool has(const std::string& key) override;
  void remove(const std::string& key) override;
  std::optional<std::string> get_request(const std::string& rkey) override;
  bool put_request(const std::string& rkey, const std::string& key) override;
  std::optional<nlohmann::json> get_autotune(const std::string& akey) override;
  bool put_autotune(const std::string& akey, const nlohmann::json& ranking) override;
  std::optional<std::string> generation() override;
  bool available() override { return redis_.up(); }

  Redis& redis() { return redis_; }
  uint64_t max_blob() const { return max_blob_; }
  RedisTierCounters counters() const;
  nlohmann::json to_json() const;  // url, up, last error, counters (for /status)

 private:
  Redis& redis_;
  uint64_t max_blob_;
  std::function<int64_t()> now_seconds_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, puts_{0}, corrupt_{0}, too_big_{0};
};

}  // namespace kforge::core::storage
