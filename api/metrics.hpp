// What /metrics (Prometheus text format) and /status report that the core does not count
// itself: requests by route and status, cache outcomes over time, compile and benchmark
// durations (histograms), evictions and sandbox failures. Gauges that are read at scrape
// time (queue depth, busy workers, cache bytes) are passed to render(). Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/base/sharded_map.hpp"

namespace kforge::api {

class Histogram {
 public:
  static constexpr std::array<double, 12> kBounds = {0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                                     2.5,  5,    10,  30,   60,  300};
  void observe(double seconds);
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::array<uint64_t, kBounds.size() + 1> buckets_{};
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Cache hits, counted rather than logged as jobs: per route, per client and per kernel
// (count and last time), since this process started. Recording takes no lock that other
// hits wait on: a counter is found under a shard's shared lock and bumped atomically.
// Clients and kernels are bounded (a rarely seen one may be forgotten to make room).
class HitCounts {
 public:
  struct Count {
    uint64_t hits = 0;
    double last_at = 0;  // unix seconds
  };
  void record(const std::string& route, const std::string& client, const std::string& key);
  std::optional<Count> kernel(const std::string& key) const;
  // {"total", "by_route": {route: n}, "top_clients": [{client, hits, last_at}], "kernels"}
  nlohmann::json to_json(size_t top_clients = 20) const;
  std::map<std::string, uint64_t> by_route() const;

 private:
  struct Counter {
    std::atomic<uint64_t> hits{0};
    std::atomic<double> last_at{0};
    void bump(double now);
    Count read() const { return {hits.load(), last_at.load()}; }
  };
  using Table = core::ShardedMap<std::shared_ptr<Counter>>;
  static void bump(Table& t, const std::string& name, double now);
  Table by_route_{256}, by_client_{4096}, by_kernel_{1 << 16};
};

class Metrics {
 public:
  void request(const std::string& route, const std::string& method, int status);
  // "hit", "miss" or "joined": one kernel answer.
  void cache_outcome(const std::string& outcome);
  void compile(const std::string& backend, double seconds, const std::string& key);
  void benchmark(const std::string& backend, double seconds);
  void evicted(uint64_t entries, uint64_t bytes);

  struct Gauges {
    size_t queue_depth = 0, queue_max = 0, workers = 0, busy = 0;
    uint64_t cache_bytes = 0, cache_entries = 0, cache_max_bytes = 0, compiler_runs = 0,
             benchmark_runs = 0;
    uint64_t sandbox_failures = 0;
  };
  std::string render(const Gauges& g, const HitCounts& hits) const;

  // For the status page: counts and the last hour's series.
  nlohmann::json cache_json() const;   // hits, misses, joins, hit_rate, evictions
  nlohmann::json series_json() const;  // compile_seconds, hit_rate per minute
  double requests_per_minute() const;  // over the last five minutes

 private:
  // What every request counts lives in shards, one per group of threads, each behind its
  // own lock: threads of the HTTP pool do not wait for each other; readers merge them.
  struct Hot {
    std::mutex mu;
    std::map<std::tuple<std::string, std::string, int>, uint64_t> requests;  // route, method, status
    std::map<std::string, uint64_t> outcomes;
    std::map<int64_t, std::pair<uint64_t, uint64_t>> per_minute;  // minute -> (hits incl. joins, misses)
    std::deque<std::pair<int64_t, uint64_t>> request_seconds;    // (unix second, requests)
    void trim(double now);  // drops what is older than an hour (five minutes of seconds); mu held
  };
  static constexpr size_t kHotShards = 16;
  Hot& hot();  // this thread's shard
  mutable std::array<Hot, kHotShards> hot_;
  std::atomic<size_t> next_shard_{0};
  std::map<std::string, uint64_t> outcomes() const;  // merged

  void trim(double now);  // drops compile points older than an hour; mu_ held
  mutable std::mutex mu_;
  std::map<std::string, Histogram> compile_, benchmark_;
  uint64_t evictions_ = 0, evicted_bytes_ = 0;
  struct CompilePoint {
    double t, seconds;
    std::string key;
  };
  std::deque<CompilePoint> compile_points_;
};

}  // namespace kforge::api
