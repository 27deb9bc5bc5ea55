#include "core/build/prefetch.hpp"

#include <chrono>
#include <optional>

#include "core/base/utf8.hpp"

namespace kforge::core {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kErrorLogBytes = 4096;  // of a failed entry's compiler log, in its report
constexpr auto kPublishEvery = std::chrono::milliseconds(100);  // progress during a run of hits

// A failed entry's report: the problem without its bulk (argv dropped, the log cut).
nlohmann::json entry_problem(const nlohmann::json& p) {
  nlohmann::json e = {{"type", p.value("type", "")},
                      {"title", p.value("title", "")},
                      {"status", p.value("status", 500)},
                      {"detail", p.value("detail", "")}};
  if (p.contains("errors") && !p["errors"].empty()) e["errors"] = p["errors"];
  if (p.contains("log") && p["log"].is_string()) {
    std::string log = p["log"];
    if (log.size() > kErrorLogBytes) {
      log = sanitize_utf8(std::string_view(log).substr(0, kErrorLogBytes)) +
            "\n[... cut; the whole log: GET /kernels/{key}/log or POST /kernels]\n";
    }
    e["log"] = log;
  }
  return e;
}

Error shutting_down() {
  return Error::make(ErrorKind::kOverloaded, "the service is shutting down; the prefetch did not finish");
}

// One in-flight build of an entry.
struct Flight {
  size_t index;
  std::shared_ptr<Job> job;
  bool joined;
  std::string key, kernel_name;
};

nlohmann::json outcome_of(const Flight& f) {
  const nlohmann::json body = f.job->body();
  nlohmann::json e = {{"key", body.value("key", f.key)},
                      {"kernel_name", body.value("kernel_name", f.kernel_name)},
                      {"job", f.job->id()}};
  if (f.job->http_status() == 200) {
    const std::string cache = f.joined ? "joined" : body.value("cache", "miss");
    e["outcome"] = cache == "hit" ? "hit" : "built";
    e["cache"] = cache;
  } else {
    e["outcome"] = "failed";
    e["cache"] = body.value("cache", nlohmann::json(nullptr));
    e["error"] = entry_problem(body);
  }
  return e;
}

}  // namespace

// The counts and outcomes of one run; `recent` holds what finished since the last event.
struct Prefetcher::Progress {
  size_t total = 0, done = 0, hit = 0, built = 0, failed = 0, in_flight = 0;
  nlohmann::json entries = nlohmann::json::array();
  nlohmann::json recent = nlohmann::json::array();
  bool dirty = false;

  void record(size_t i, nlohmann::json e) {
    const std::string outcome = e["outcome"];
    (outcome == "hit" ? hit : outcome == "built" ? built : failed)++;
    e["index"] = i;
    e["seq"] = ++done;
    entries[i].update(e);
    recent.push_back(entries[i]);
    dirty = true;
  }
  nlohmann::json counts() const {
    return {{"total", total}, {"done", done},     {"hit", hit},
            {"built", built}, {"failed", failed}, {"in_flight", in_flight}};
  }
  void publish(Job& job) {
    nlohmann::json info = counts();
    info["recent"] = std::move(recent);
    recent = nlohmann::json::array();
    dirty = false;
    job.set_info("prefetch", std::move(info));
  }
};

Prefetcher::Prefetcher(Builder& builder, JobQueue& jobs, Hooks hooks)
    : builder_(builder), jobs_(jobs), hooks_(std::move(hooks)), thread_([this] { loop(); }) {}

Prefetcher::~Prefetcher() { stop(); }

Result<std::shared_ptr<Job>> Prefetcher::enqueue(nlohmann::json info, std::vector<Entry> entries,
                                                 std::string client) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return fail(ErrorKind::kOverloaded, "the service is shutting down");
    if (waiting_.size() >= kMaxWaiting) {
      return fail(ErrorKind::kOverloaded,
                  std::to_string(waiting_.size()) + " prefetches are waiting for the one that runs; try later");
    }
    job = jobs_.start(std::move(info));
    waiting_.push_back({job, std::move(entries), std::move(client)});
  }
  cv_.notify_all();
  return job;
}

void Prefetcher::wake() {
  {
    std::lock_guard lock(mu_);
    ++changes_;
  }
  cv_.notify_all();
}

void Prefetcher::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Prefetcher::loop() {
  for (;;) {
    Task t;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
      if (stopping_) break;
      t = std::move(waiting_.front());
      waiting_.pop_front();
    }
    run(t);
  }
  std::deque<Task> left;
  {
    std::lock_guard lock(mu_);
    left.swap(waiting_);
  }
  for (auto& t : left) t.job->finish(503, hooks_.problem(shutting_down()), "");
}

void Prefetcher::run(Task& t) {
  Job& job = *t.job;
  const auto t0 = Clock::now();
  Progress p;
  p.total = t.entries.size();
  for (const auto& e : t.entries) {
    nlohmann::json slot = {{"outcome", nullptr}};
    if (!e.label.empty()) slot["label"] = e.label;
    p.entries.push_back(std::move(slot));
  }
  job.set_state(JobState::kCompiling);
  const size_t limit = jobs_.workers();
  std::vector<Flight> flying;
  std::optional<BuildPlan> held;  // planned, waiting for room in the queue
  size_t next = 0;
  auto last_publish = Clock::now();
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
      seen = changes_;
    }
    std::erase_if(flying, [&](const Flight& f) {
      if (!f.job->finished()) return false;
      p.record(f.index, outcome_of(f));
      return true;
    });
    // Plans run ahead (a hit needs no room); a miss waits for a slot and for the queue.
    while (next < t.entries.size()) {
      if (!held) {
        auto plan = builder_.plan(t.entries[next].req);
        if (!plan) {
          // A cached compile error (a hit), or what went wrong.
          const nlohmann::json problem = hooks_.problem(plan.error());
          if (plan.error().kind == ErrorKind::kCompileFailed) hooks_.cache_outcome("hit");
          p.record(next, {{"outcome", "failed"},
                          {"key", problem.value("key", nlohmann::json(nullptr))},
                          {"kernel_name", nullptr},
                          {"cache", problem.value("cache", nlohmann::json(nullptr))},
                          {"error", entry_problem(problem)}});
          ++next;
        } else if (plan->hit) {
          hooks_.hit(*plan, t.client);
          p.record(next, {{"outcome", "hit"},
                          {"cache", "hit"},
                          {"key", plan->key()},
                          {"kernel_name", plan->kernel_name()}});
          ++next;
        } else {
          held = std::move(*plan);
        }
        if (p.dirty && Clock::now() - last_publish > kPublishEvery) {
          p.publish(job);
          last_publish = Clock::now();
        }
        continue;
      }
      if (flying.size() >= limit || jobs_.depth() >= jobs_.max_queue()) break;
      Flight f{next, nullptr, false, held->key(), held->kernel_name()};
      auto submitted = hooks_.submit(t.entries[next], *held, job, t.client);
      if (!submitted) {
        if (submitted.error().kind == ErrorKind::kOverloaded) break;  // raced: wait
        p.record(next, {{"outcome", "failed"},
                        {"key", f.key},
                        {"kernel_name", f.kernel_name},
                        {"error", entry_problem(hooks_.problem(submitted.error()))}});
      } else {
        f.job = submitted->job;
        f.joined = submitted->joined;
        if (f.joined) hooks_.cache_outcome("joined");
        p.entries[next]["job"] = f.job->id();
        flying.push_back(std::move(f));
      }
      held.reset();
      ++next;
    }
    if (next == t.entries.size() && flying.empty()) break;
    if (p.in_flight != flying.size()) {
      p.in_flight = flying.size();
      p.dirty = true;
    }
    if (p.dirty) {
      p.publish(job);
      last_publish = Clock::now();
    }
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stopping_ || changes_ != seen; });
  }
  p.in_flight = flying.size();
  nlohmann::json result = p.counts();
  result["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
  result["entries"] = p.entries;
  p.publish(job);
  if (p.done < p.total) {  // stopped: the service is going down
    nlohmann::json problem = hooks_.problem(shutting_down());
    problem["prefetch"] = std::move(result);
    job.finish(503, std::move(problem), "");
    return;
  }
  job.finish(200, std::move(result), "");
}

}  // namespace kforge::core
