// What /metrics (Prometheus text format) and /status report that the core does not count
// itself: requests by route and status, cache outcomes over time, compile and benchmark
// durations (histograms), evictions and sandbox failures. Gauges that are read at scrape
// time (queue depth, busy workers, cache bytes) are passed to render(). Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

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
  std::string render(const Gauges& g) const;

  // For the status page: counts and the last hour's series.
  nlohmann::json cache_json() const;   // hits, misses, joins, hit_rate, evictions
  nlohmann::json series_json() const;  // compile_seconds, hit_rate per minute
  double requests_per_minute() const;  // over the last five minutes

 private:
  void trim(double now);  // drops series points older than an hour; mu_ held

  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;  // route, method, status
  std::map<std::string, uint64_t> outcomes_;
  std::map<std::string, Histogram> compile_, benchmark_;
  uint64_t evictions_ = 0, evicted_bytes_ = 0;
  struct CompilePoint {
    double t, seconds;
    std::string key;
  };
  std::deque<CompilePoint> compile_points_;
  std::map<int64_t, std::pair<uint64_t, uint64_t>>
      per_minute_;  // minute -> (hits incl. joins, misses)
  std::deque<std::pair<int64_t, uint64_t>> request_seconds_;  // (unix second, requests)
};

}  // namespace kforge::api
