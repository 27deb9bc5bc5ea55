// POST /prefetch (issue 16): warms a cache from a list of kernel requests, such as the
// manifest a client recorded while a model compiled (docs/API.md, "POST /prefetch").
//
// The whole list is validated before anything runs (each entry parsed, prepared and
// rendered as POST /kernels would): a malformed entry is a 400 naming /requests/<i>/....
// The answer is a job of kind "prefetch" that one thread, the prefetch thread, runs: each
// entry is planned (a hit is recorded at once) and each miss submitted to the job queue
// as POST /kernels submits it (single-flight on the kernel key). At most --compile-jobs of
// its builds are in flight, and one is submitted only while the queue has room, so a
// prefetch waits for the queue instead of being refused by it. Every change of its
// progress bumps the job (one SSE `state` event); the result lists each entry's outcome:
// hit, built or failed (with the problem). Prefetches run one at a time, in order; a few
// more may wait. The thread wakes on every job change (Server's queue observer calls
// prefetch_wake()) and is joined by ~Server before the queue goes.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "api/http_util.hpp"
#include "api/server.hpp"
#include "core/utf8.hpp"

namespace kforge::api {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kManifestFormat = "kforge-prefetch/1";
constexpr size_t kMaxWaiting = 8;        // prefetches accepted while one runs
constexpr size_t kMaxLabelBytes = 200;
constexpr size_t kErrorLogBytes = 4096;  // of a failed entry's compiler log, in its report
constexpr auto kPublishEvery = std::chrono::milliseconds(100);  // progress during a run of hits

// An entry's error, moved under /requests/<i>.
core::Error entry_error(core::Error e, size_t i) {
  const std::string at = "/requests/" + std::to_string(i);
  if (e.fields.empty()) e.fields.push_back({at, e.message});
  for (auto& f : e.fields) {
    if (!f.field.starts_with(at)) f.field = at + f.field;
  }
  e.message = at + ": " + e.message;
  return e;
}

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
      log = core::sanitize_utf8(std::string_view(log).substr(0, kErrorLogBytes)) +
            "\n[... cut; the whole log: GET /kernels/{key}/log or POST /kernels]\n";
    }
    e["log"] = log;
  }
  return e;
}

nlohmann::json shutting_down() {
  return problem_json(503, "the service is shutting down; the prefetch did not finish");
}

}  // namespace

struct Server::Prefetcher {
  struct Entry {
    core::KernelRequest req;
    std::string label;
  };
  struct Task {
    std::shared_ptr<core::Job> job;
    std::vector<Entry> entries;
    std::string client;
  };
  // One in-flight build of an entry.
  struct Flight {
    size_t index;
    std::shared_ptr<core::Job> job;
    bool joined;
    std::string key, kernel_name;
  };
  // The counts and outcomes of one run; `recent` holds what finished since the last event.
  struct Progress {
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
      return {{"total", total}, {"done", done},         {"hit", hit},
              {"built", built}, {"failed", failed},     {"in_flight", in_flight}};
    }
  };

  std::mutex mu;
  std::condition_variable cv;
  uint64_t changes = 0;  // bumped on every job change: the thread's wake-up
  bool stopping = false;
  std::deque<Task> waiting;
  std::thread thread;

  void wake() {
    {
      std::lock_guard lock(mu);
      ++changes;
    }
    cv.notify_all();
  }

  void loop(Server& s) {
    for (;;) {
      Task t;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stopping || !waiting.empty(); });
        if (stopping) break;
        t = std::move(waiting.front());
        waiting.pop_front();
      }
      run(s, t);
    }
    std::deque<Task> left;
    {
      std::lock_guard lock(mu);
      left.swap(waiting);
    }
    for (auto& t : left) t.job->finish(503, shutting_down(), "");
  }

  void publish(core::Job& job, Progress& p) {
    nlohmann::json info = p.counts();
    info["recent"] = std::move(p.recent);
    p.recent = nlohmann::json::array();
    p.dirty = false;
    job.set_info("prefetch", std::move(info));
  }

  void run(Server& s, Task& t) {
    core::Job& job = *t.job;
    const auto t0 = Clock::now();
    Progress p;
    p.total = t.entries.size();
    for (const auto& e : t.entries) {
      nlohmann::json slot = {{"outcome", nullptr}};
      if (!e.label.empty()) slot["label"] = e.label;
      p.entries.push_back(std::move(slot));
    }
    job.set_state(core::JobState::kCompiling);
    const size_t limit = s.jobs_.workers();
    std::vector<Flight> flying;
    std::optional<core::BuildPlan> held;  // planned, waiting for room in the queue
    size_t next = 0;
    auto last_publish = Clock::now();
    for (;;) {
      uint64_t seen;
      {
        std::lock_guard lock(mu);
        if (stopping) break;
        seen = changes;
      }
      std::erase_if(flying, [&](const Flight& f) {
        if (!f.job->finished()) return false;
        p.record(f.index, outcome_of(f));
        return true;
      });
      // Plans run ahead (a hit needs no room); a miss waits for a slot and for the queue.
      while (next < t.entries.size()) {
        if (!held) {
          auto plan = s.svc_.builder.plan(t.entries[next].req);
          if (!plan) {
            p.record(next, failed_plan(s, plan.error()));
            ++next;
          } else if (plan->hit) {
            s.metrics_.cache_outcome("hit");
            s.hits_.record("POST /prefetch", t.client, plan->key());
            p.record(next, {{"outcome", "hit"},
                            {"cache", "hit"},
                            {"key", plan->key()},
                            {"kernel_name", plan->kernel_name()}});
            ++next;
          } else {
            held = std::move(*plan);
          }
          if (p.dirty && Clock::now() - last_publish > kPublishEvery) {
            publish(job, p);
            last_publish = Clock::now();
          }
          continue;
        }
        if (flying.size() >= limit || s.jobs_.depth() >= s.jobs_.max_queue()) break;
        nlohmann::json info = s.job_info("kernel", t.entries[next].req, t.client, "");
        info["archs"] = held->prepared.archs;
        info["key"] = held->key();
        info["kernel_name"] = held->kernel_name();
        info["prefetch_job"] = job.id();  // the prefetch it is part of
        Flight f{next, nullptr, false, held->key(), held->kernel_name()};
        auto submitted = s.jobs_.submit(info, held->key(), s.build_work(*held, nullptr));
        if (!submitted) {
          if (submitted.error().kind == core::ErrorKind::kOverloaded) break;  // raced: wait
          p.record(next, {{"outcome", "failed"},
                          {"key", f.key},
                          {"kernel_name", f.kernel_name},
                          {"error", entry_problem(problem_json(submitted.error()))}});
        } else {
          f.job = submitted->job;
          f.joined = submitted->joined;
          if (f.joined) s.metrics_.cache_outcome("joined");
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
        publish(job, p);
        last_publish = Clock::now();
      }
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stopping || changes != seen; });
    }
    p.in_flight = flying.size();
    nlohmann::json result = p.counts();
    result["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
    result["entries"] = p.entries;
    publish(job, p);
    if (p.done < p.total) {  // stopped: the service is going down
      nlohmann::json problem = shutting_down();
      problem["prefetch"] = std::move(result);
      job.finish(503, std::move(problem), "");
      return;
    }
    job.finish(200, std::move(result), "");
  }

  static nlohmann::json outcome_of(const Flight& f) {
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

  // An entry whose plan failed: a cached compile error (a hit), or what went wrong.
  static nlohmann::json failed_plan(Server& s, const core::Error& e) {
    const nlohmann::json problem = problem_json(e);
    nlohmann::json out = {{"outcome", "failed"},
                          {"key", problem.value("key", nlohmann::json(nullptr))},
                          {"kernel_name", nullptr},
                          {"cache", problem.value("cache", nlohmann::json(nullptr))},
                          {"error", entry_problem(problem)}};
    if (e.kind == core::ErrorKind::kCompileFailed) s.metrics_.cache_outcome("hit");
    return out;
  }

  // POST /prefetch: validate everything, then queue the task and answer with its job.
  static void accept(Server& s, const httplib::Request& req, httplib::Response& res) {
    auto body = core::parse_json_body(req.body, s.config_.max_json_depth);
    if (!body) return send_error(res, body.error());
    if (!body->is_object())
      return send_problem(res, problem_json(400, "the request body must be a JSON object", ""));
    static const std::set<std::string> kFields = {"format", "requests", "label", "recorded",
                                                  "wait_ms"};
    for (const auto& [k, v] : body->items()) {
      if (!kFields.contains(k)) {
        return send_problem(
            res, problem_json(400,
                              "unknown field `" + core::sanitize_utf8(k) +
                                  "` (a prefetch takes format, requests, label, recorded, wait_ms)",
                              "/" + core::sanitize_utf8(k)));
      }
    }
    if (body->contains("format") && (*body)["format"] != kManifestFormat) {
      return send_problem(res, problem_json(400,
                                            std::string("format is \"") + kManifestFormat +
                                                "\" (the only manifest format this server reads)",
                                            "/format"));
    }
    std::string label;
    if (body->contains("label")) {
      const auto& l = (*body)["label"];
      if (!l.is_string() || l.get_ref<const std::string&>().size() > kMaxLabelBytes)
        return send_problem(res, problem_json(400, "label is a string of at most 200 bytes", "/label"));
      label = l;
    }
    if (body->contains("recorded") && !(*body)["recorded"].is_object()) {
      return send_problem(
          res, problem_json(400, "recorded is an object (the recorder's notes; not read)", "/recorded"));
    }
    auto wait = std::chrono::milliseconds(0);
    if (body->contains("wait_ms")) {
      const auto& w = (*body)["wait_ms"];
      if (!w.is_number_integer() || w.get<int64_t>() < 0)
        return send_problem(res, problem_json(400, "wait_ms is a non-negative integer (milliseconds)", "/wait_ms"));
      wait = std::min<std::chrono::milliseconds>(s.config_.request_deadline,
                                                 std::chrono::milliseconds(w.get<int64_t>()));
    }
    if (req.get_header_value("Prefer").find("respond-async") != std::string::npos) wait = {};
    if (!body->contains("requests") || !(*body)["requests"].is_array())
      return send_problem(res, problem_json(400, "requests is a list of POST /kernels bodies", "/requests"));
    auto& list = (*body)["requests"];
    if (list.empty() || list.size() > s.config_.max_prefetch) {
      return send_problem(res, problem_json(400,
                                            std::to_string(list.size()) +
                                                " requests; a prefetch takes 1 to " +
                                                std::to_string(s.config_.max_prefetch) +
                                                " (--max-prefetch)",
                                            "/requests"));
    }

    Task task;
    std::set<std::string> backends, archs;
    for (size_t i = 0; i < list.size(); ++i) {
      auto& entry = list[i];
      const std::string at = "/requests/" + std::to_string(i);
      if (!entry.is_object())
        return send_problem(res, problem_json(400, at + ": a request is a JSON object", at));
      Entry e;
      if (entry.contains("label")) {
        const auto& l = entry["label"];
        if (!l.is_string() || l.get_ref<const std::string&>().size() > kMaxLabelBytes)
          return send_problem(res, problem_json(400, at + "/label: a string of at most 200 bytes", at + "/label"));
        e.label = l;
        entry.erase("label");
      }
      // What POST /kernels takes, as it is recorded: how long to wait is no part of a
      // request, and a prefetch compiles; it does not measure.
      entry.erase("wait_ms");
      entry.erase("benchmark");
      auto kreq = core::parse_kernel_request(entry, s.config_.limits);
      if (!kreq) return send_error(res, entry_error(kreq.error(), i));
      auto prepared = s.svc_.builder.prepare(*kreq);
      if (!prepared) return send_error(res, entry_error(prepared.error(), i));
      if (auto rendered = s.svc_.builder.render(*prepared); !rendered)
        return send_error(res, entry_error(rendered.error(), i));
      backends.insert(std::string(core::backend_name(kreq->backend)));
      archs.insert(prepared->archs.begin(), prepared->archs.end());
      e.req = std::move(*kreq);
      task.entries.push_back(std::move(e));
    }

    Prefetcher& pf = *s.prefetch_;
    std::string joined_backends;
    for (const auto& b : backends) joined_backends += (joined_backends.empty() ? "" : ",") + b;
    nlohmann::json info = {{"kind", "prefetch"},
                           {"label", label.empty() ? nlohmann::json(nullptr) : nlohmann::json(label)},
                           {"template", nullptr},
                           {"backend", joined_backends},
                           {"archs", archs},
                           {"client", req.remote_addr},
                           {"request_id", res.get_header_value("X-Request-Id")},
                           {"key", nullptr},
                           {"kernel_name", nullptr},
                           {"prefetch",
                            {{"total", task.entries.size()},
                             {"done", 0},
                             {"hit", 0},
                             {"built", 0},
                             {"failed", 0},
                             {"in_flight", 0},
                             {"recent", nlohmann::json::array()}}}};
    task.client = req.remote_addr;
    std::shared_ptr<core::Job> job;
    {
      std::lock_guard lock(pf.mu);
      if (pf.stopping)
        return send_problem(res, problem_json(503, "the service is shutting down"));
      if (pf.waiting.size() >= kMaxWaiting) {
        return send_problem(res, problem_json(503, std::to_string(pf.waiting.size()) +
                                                       " prefetches are waiting for the one that runs; try later"));
      }
      job = s.jobs_.start(std::move(info));
      task.job = job;
      pf.waiting.push_back(std::move(task));
    }
    pf.cv.notify_all();
    res.set_header("Location", "/jobs/" + job->id());
    if (wait.count() > 0 && job->wait_until(Clock::now() + wait))
      return send_json(res, job->to_json(true), 200);
    send_json(res, job->to_json(false), 202);
  }
};

void Server::prefetch_routes() {
  prefetch_ = std::make_shared<Prefetcher>();
  prefetch_->thread = std::thread([this] { prefetch_->loop(*this); });
  route("POST", "/prefetch", "/prefetch", Role::kSubmit,
        [this](const httplib::Request& req, httplib::Response& res) {
          Prefetcher::accept(*this, req, res);
        });
}

void Server::prefetch_wake() {
  if (prefetch_) prefetch_->wake();
}

void Server::stop_prefetch() {
  if (!prefetch_) return;
  {
    std::lock_guard lock(prefetch_->mu);
    prefetch_->stopping = true;
  }
  prefetch_->cv.notify_all();
  if (prefetch_->thread.joinable()) prefetch_->thread.join();
}

}  // namespace kforge::api
