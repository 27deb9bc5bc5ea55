#include "api/metrics.hpp"

#include <chrono>
#include <cstdio>

namespace kforge::api {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

void help(std::string& out, const char* name, const char* type, const char* text) {
  out += std::string("# HELP ") + name + " " + text + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + num(v) + "\n";
}

}  // namespace

void Histogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  ++buckets_[i];
  ++count_;
  sum_ += seconds;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i];
    sample(out, name + "_bucket", sep + "le=\"" + num(kBounds[i]) + "\"", double(cumulative));
  }
  sample(out, name + "_bucket", sep + "le=\"+Inf\"", double(count_));
  sample(out, name + "_sum", labels, sum_);
  sample(out, name + "_count", labels, double(count_));
}

void Metrics::request(const std::string& route, const std::string& method, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{route, method, status}];
  const double now = unix_now();
  const int64_t second = int64_t(now);
  if (request_seconds_.empty() || request_seconds_.back().first != second)
    request_seconds_.push_back({second, 0});
  ++request_seconds_.back().second;
  trim(now);
}

void Metrics::cache_outcome(const std::string& outcome) {
  std::lock_guard lock(mu_);
  ++outcomes_[outcome];
  auto& m = per_minute_[int64_t(unix_now()) / 60 * 60];
  (outcome == "miss" ? m.second : m.first)++;
}

void Metrics::compile(const std::string& backend, double seconds, const std::string& key) {
  std::lock_guard lock(mu_);
  compile_[backend].observe(seconds);
  compile_points_.push_back({unix_now(), seconds, key});
}

void Metrics::benchmark(const std::string& backend, double seconds) {
  std::lock_guard lock(mu_);
  benchmark_[backend].observe(seconds);
}

void Metrics::evicted(uint64_t entries, uint64_t bytes) {
  std::lock_guard lock(mu_);
  evictions_ += entries;
  evicted_bytes_ += bytes;
}

void Metrics::trim(double now) {
  const double hour_ago = now - 3600;
  while (!compile_points_.empty() && compile_points_.front().t < hour_ago)
    compile_points_.pop_front();
  while (!per_minute_.empty() && double(per_minute_.begin()->first) < hour_ago)
    per_minute_.erase(per_minute_.begin());
  while (!request_seconds_.empty() && double(request_seconds_.front().first) < now - 300)
    request_seconds_.pop_front();
}

std::string Metrics::render(const Gauges& g) const {
  std::lock_guard lock(mu_);
  std::string out;
  help(out, "kforge_http_requests_total", "counter", "HTTP requests by route, method and status.");
  for (const auto& [k, v] : requests_) {
    const auto& [route, method, status] = k;
    sample(out, "kforge_http_requests_total",
           "route=\"" + route + "\",method=\"" + method + "\",status=\"" + std::to_string(status) +
               "\"",
           double(v));
  }
  help(out, "kforge_cache_requests_total", "counter",
       "Kernel answers by cache outcome (hit, miss, joined, renamed: compiled before under another name, relinked).");
  for (const char* o : {"hit", "miss", "joined", "renamed"}) {
    auto it = outcomes_.find(o);
    sample(out, "kforge_cache_requests_total", std::string("outcome=\"") + o + "\"",
           it == outcomes_.end() ? 0.0 : double(it->second));
  }
  struct Scalar {
    const char* name;
    const char* type;
    const char* text;
    double value;
  };
  const Scalar scalars[] = {
      {"kforge_compiler_runs_total", "counter", "Compiler processes started.",
       double(g.compiler_runs)},
      {"kforge_benchmark_runs_total", "counter", "Runner processes started for benchmarks.",
       double(g.benchmark_runs)},
      {"kforge_queue_depth", "gauge", "Jobs waiting for a worker.", double(g.queue_depth)},
      {"kforge_queue_capacity", "gauge", "Most jobs that may wait (--max-queue).",
       double(g.queue_max)},
      {"kforge_workers", "gauge", "Compile workers (--compile-jobs).", double(g.workers)},
      {"kforge_workers_busy", "gauge", "Compile workers running a job.", double(g.busy)},
      {"kforge_cache_bytes", "gauge", "Bytes of published cache entries.", double(g.cache_bytes)},
      {"kforge_cache_entries", "gauge", "Published cache entries (negative ones included).",
       double(g.cache_entries)},
      {"kforge_cache_max_bytes", "gauge", "The cache's size bound (0: unbounded).",
       double(g.cache_max_bytes)},
      {"kforge_cache_evictions_total", "counter",
       "Entries evicted to keep the cache under its bound.", double(evictions_)},
      {"kforge_cache_evicted_bytes_total", "counter", "Bytes evicted.", double(evicted_bytes_)},
      {"kforge_sandbox_failures_total", "counter", "Child processes the sandbox could not start.",
       double(g.sandbox_failures)},
  };
  for (const auto& m : scalars) {
    help(out, m.name, m.type, m.text);
    sample(out, m.name, "", m.value);
  }
  help(out, "kforge_compile_duration_seconds", "histogram",
       "Wall-clock time of compiles that ran a compiler.");
  for (const auto& [b, h] : compile_)
    h.render(out, "kforge_compile_duration_seconds", "backend=\"" + b + "\"");
  help(out, "kforge_benchmark_duration_seconds", "histogram", "Wall-clock time of benchmark runs.");
  for (const auto& [b, h] : benchmark_)
    h.render(out, "kforge_benchmark_duration_seconds", "backend=\"" + b + "\"");
  return out;
}

nlohmann::json Metrics::cache_json() const {
  std::lock_guard lock(mu_);
  auto count = [&](const char* o) {
    auto it = outcomes_.find(o);
    return it == outcomes_.end() ? uint64_t{0} : it->second;
  };
  const uint64_t hits = count("hit"), misses = count("miss"), joins = count("joined");
  const uint64_t all = hits + misses + joins;
  return {{"hits", hits},
          {"misses", misses},
          {"joins", joins},
          {"hit_rate",
           all ? nlohmann::json(double(hits + joins) / double(all)) : nlohmann::json(nullptr)},
          {"evictions", evictions_}};
}

nlohmann::json Metrics::series_json() const {
  std::lock_guard lock(mu_);
  nlohmann::json compiles = nlohmann::json::array(), rate = nlohmann::json::array();
  for (const auto& p : compile_points_)
    compiles.push_back({{"t", p.t}, {"seconds", p.seconds}, {"key", p.key}});
  for (const auto& [minute, hm] : per_minute_)
    rate.push_back({{"t", minute}, {"hits", hm.first}, {"misses", hm.second}});
  return {{"compile_seconds", compiles}, {"hit_rate", rate}};
}

double Metrics::requests_per_minute() const {
  std::lock_guard lock(mu_);
  const double now = unix_now();
  uint64_t n = 0;
  for (const auto& [second, count] : request_seconds_) n += double(second) >= now - 300 ? count : 0;
  return double(n) / 5.0;
}

}  // namespace kforge::api
