// Jobs (DESIGN §8): a bounded worker pool behind a bounded queue, single-flight on a key,
// and a bounded history of recent jobs for /jobs and the status page.
//
// A Job is what one request asked for: it moves queued -> compiling [-> benchmarking] ->
// done | failed, with the time of each phase, and ends with the HTTP status and body of
// its answer. Waiters block on it (with a deadline, for async answers) or follow each
// change (server-sent events). submit() with a flight key that is already queued or
// running returns that job instead of a new one: identical builds run once.
// A full queue is an Error of kind kOverloaded (503 with Retry-After).
// Thread-safe. The destructor fails what is still queued and joins the workers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"

namespace kforge::core {

enum class JobState { kQueued, kCompiling, kBenchmarking, kDone, kFailed };
const char* job_state_name(JobState s);

class Job {
 public:
  using Observer = std::function<void(const Job&)>;
  // `info`: what the job table shows (kind, template, backend, archs, client, key, ...);
  // `observer` hears of every state change (the job log).
  Job(std::string id, nlohmann::json info, Observer observer = {});

  const std::string& id() const { return id_; }
  void set_state(JobState s);
  void set_info(const std::string& field, nlohmann::json value);
  // Ends the job: done for a 2xx status, failed otherwise. `cache` is hit, miss or joined.
  void finish(int http_status, nlohmann::json body, std::string cache);

  bool finished() const;
  int http_status() const;
  nlohmann::json body() const;
  nlohmann::json to_json(bool with_result) const;

  // Blocks until the job finishes or the deadline passes; true when finished.
  bool wait_until(std::chrono::steady_clock::time_point deadline) const;
  // Blocks until the job's version exceeds `seen` (any change) or `timeout` passes; returns
  // the version now.
  uint64_t wait_change(uint64_t seen, std::chrono::milliseconds timeout) const;
  uint64_t version() const;

 private:
  void changed(std::unique_lock<std::mutex>& lock);

  const std::string id_;
  const Observer observer_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  nlohmann::json info_;
  nlohmann::json phases_ = nlohmann::json::object();
  JobState state_ = JobState::kQueued;
  int http_status_ = 0;
  nlohmann::json body_;
  std::string cache_;
  uint64_t version_ = 0;
};

struct JobQueueConfig {
  size_t workers = 2;
  size_t max_queue = 64;
  size_t history = 512;
  // In a cluster, job ids end in "-<instance>" (j000007-a), so that a proxy routes a job's
  // follow-up requests (GET /jobs/{id}, its events) to the instance that holds it.
  std::string instance;
};

class JobQueue {
 public:
  using Work = std::function<void(Job&)>;  // runs on a worker; must end with job.finish()
  explicit JobQueue(JobQueueConfig config, Job::Observer observer = {});
  ~JobQueue();
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  struct Submitted {
    std::shared_ptr<Job> job;
    bool joined = false;  // an identical job was already in flight
  };
  // Queues `work`, or joins the job in flight under `flight` (empty: never joins).
  Result<Submitted> submit(nlohmann::json info, const std::string& flight, Work work);
  // A job that needs no worker: it is recorded in the history and runs on the caller's
  // thread (an autotune, which fans out its own compiles; a cache hit, finished at once).
  std::shared_ptr<Job> start(nlohmann::json info);
  // Reserves room for `n` submissions at once (an autotune's choices), or kOverloaded.
  Result<void> reserve(size_t n) const;

  std::shared_ptr<Job> find(const std::string& id) const;
  std::vector<std::shared_ptr<Job>> recent(size_t limit) const;

  size_t depth() const;
  size_t busy() const;
  size_t workers() const { return config_.workers; }
  size_t max_queue() const { return config_.max_queue; }
  uint64_t joins() const;

 private:
  struct Pending {
    std::shared_ptr<Job> job;
    std::string flight;
    Work work;
  };
  void worker();
  std::shared_ptr<Job> make_job(nlohmann::json info);  // with mu_ held

  JobQueueConfig config_;
  Job::Observer observer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::map<std::string, std::shared_ptr<Job>> in_flight_;  // flight key -> job
  std::deque<std::shared_ptr<Job>> history_;
  std::map<std::string, std::weak_ptr<Job>> by_id_;
  uint64_t next_id_ = 1;
  size_t busy_ = 0;
  uint64_t joins_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kforge::core
