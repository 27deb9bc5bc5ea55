#include "api/metrics.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

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

void HitCounts::Counter::bump(double now) {
  hits.fetch_add(1, std::memory_order_relaxed);
  double last = last_at.load(std::memory_order_relaxed);
  while (last < now && !last_at.compare_exchange_weak(last, now, std::memory_order_relaxed)) {
  }
}

void HitCounts::bump(Table& t, const std::string& name, double now) {
  t.get_or_make(name, [] { return std::make_shared<Counter>(); })->bump(now);
}

void HitCounts::record(const std::string& route, const std::string& client, const std::string& key) {
  const double now = unix_now();
  bump(by_route_, route, now);
  bump(by_client_, client, now);
  bump(by_kernel_, key, now);
}

std::optional<HitCounts::Count> HitCounts::kernel(const std::string& key) const {
  auto c = by_kernel_.get(key);
  if (!c) return std::nullopt;
  return (*c)->read();
}

std::map<std::string, uint64_t> HitCounts::by_route() const {
  std::map<std::string, uint64_t> out;
  by_route_.for_each([&](const std::string& route, const auto& c) { out[route] = c->hits.load(); });
  return out;
}

nlohmann::json HitCounts::to_json(size_t top_clients) const {
  uint64_t total = 0;
  nlohmann::json routes = nlohmann::json::object();
  for (const auto& [route, n] : by_route()) {
    routes[route] = n;
    total += n;
  }
  std::vector<std::pair<std::string, Count>> clients;
  by_client_.for_each([&](const std::string& client, const auto& c) { clients.emplace_back(client, c->read()); });
  std::sort(clients.begin(), clients.end(),
            [](const auto& a, const auto& b) { return a.second.hits > b.second.hits; });
  if (clients.size() > top_clients) clients.resize(top_clients);
  nlohmann::json top = nlohmann::json::array();
  for (const auto& [client, c] : clients) top.push_back({{"client", client}, {"hits", c.hits}, {"last_at", c.last_at}});
  return {{"total", total}, {"by_route", routes}, {"top_clients", top}, {"kernels", by_kernel_.size()}};
}

Metrics::Hot& Metrics::hot() {
  thread_local std::map<const Metrics*, size_t> mine;  // a thread keeps its shard per Metrics
  auto [it, fresh] = mine.try_emplace(this, 0);
  if (fresh) it->second = next_shard_.fetch_add(1) % kHotShards;
  return hot_[it->second];
}

void Metrics::Hot::trim(double now) {
  const double hour_ago = now - 3600;
  while (!per_minute.empty() && double(per_minute.begin()->first) < hour_ago)
    per_minute.erase(per_minute.begin());
  while (!request_seconds.empty() && double(request_seconds.front().first) < now - 300)
    request_seconds.pop_front();
}

void Metrics::request(const std::string& route, const std::string& method, int status) {
  Hot& h = hot();
  std::lock_guard lock(h.mu);
  ++h.requests[{route, method, status}];
  const double now = unix_now();
  const int64_t second = int64_t(now);
  if (h.request_seconds.empty() || h.request_seconds.back().first != second)
    h.request_seconds.push_back({second, 0});
  ++h.request_seconds.back().second;
  h.trim(now);
}

void Metrics::cache_outcome(const std::string& outcome) {
  Hot& h = hot();
  std::lock_guard lock(h.mu);
  ++h.outcomes[outcome];
  auto& m = h.per_minute[int64_t(unix_now()) / 60 * 60];
  (outcome == "miss" ? m.second : m.first)++;
}

std::map<std::string, uint64_t> Metrics::outcomes() const {
  std::map<std::string, uint64_t> out;
  for (Hot& h : hot_) {
    std::lock_guard lock(h.mu);
    for (const auto& [o, n] : h.outcomes) out[o] += n;
  }
  return out;
}

void Metrics::compile(const std::string& backend, double seconds, const std::string& key) {
  std::lock_guard lock(mu_);
  compile_[backend].observe(seconds);
  compile_points_.push_back({unix_now(), seconds, key});
  trim(unix_now());
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
  while (!compile_points_.empty() && compile_points_.front().t < now - 3600)
    compile_points_.pop_front();
}

std::string Metrics::render(const Gauges& g, const HitCounts& hits) const {
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests;
  for (Hot& h : hot_) {
    std::lock_guard lock(h.mu);
    for (const auto& [k, v] : h.requests) requests[k] += v;
  }
  const auto outcomes_ = outcomes();
  std::lock_guard lock(mu_);
  std::string out;
  help(out, "kforge_http_requests_total", "counter", "HTTP requests by route, method and status.");
  for (const auto& [k, v] : requests) {
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
  help(out, "kforge_hits_total", "counter",
       "Answers served from the cache by route: kernel answers that were hits, and artifact, object, "
       "source and log downloads.");
  for (const auto& [route, n] : hits.by_route()) sample(out, "kforge_hits_total", "route=\"" + route + "\"", double(n));
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
  const auto outcomes_ = outcomes();
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
  std::map<int64_t, std::pair<uint64_t, uint64_t>> per_minute;
  for (Hot& h : hot_) {
    std::lock_guard hl(h.mu);
    h.trim(unix_now());
    for (const auto& [minute, hm] : h.per_minute) {
      per_minute[minute].first += hm.first;
      per_minute[minute].second += hm.second;
    }
  }
  for (const auto& [minute, hm] : per_minute)
    rate.push_back({{"t", minute}, {"hits", hm.first}, {"misses", hm.second}});
  return {{"compile_seconds", compiles}, {"hit_rate", rate}};
}

double Metrics::requests_per_minute() const {
  const double now = unix_now();
  uint64_t n = 0;
  for (Hot& h : hot_) {
    std::lock_guard lock(h.mu);
    for (const auto& [second, count] : h.request_seconds) n += double(second) >= now - 300 ? count : 0;
  }
  return double(n) / 5.0;
}

}  // namespace kforge::api
