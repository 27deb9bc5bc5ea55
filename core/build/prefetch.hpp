// Prefetch scheduling (issue 16): warms a cache from a list of kernel requests, such as
// the manifest a client recorded while a model compiled. POST /prefetch
// (api/routes_prefetch.cpp) validates the list and hands it here as a started job.
//
// One thread, the prefetch thread, runs the prefetches one at a time, in the order they
// came; kMaxWaiting more may wait. Each entry is planned (a hit is recorded at once, and so
// is a cached compile error) and each miss submitted to the job queue through
// Hooks::submit, as POST /kernels submits it (single-flight on the kernel key). At most
// JobQueue::workers() of its builds are in flight, and one is submitted only while the
// queue has room, so a prefetch waits for the queue instead of being refused by it. Every
// change of its progress sets the job's info "prefetch" (one SSE `state` event); the result
// lists each entry's outcome: hit, built or failed (with the problem). The thread sleeps on
// a counter that wake() bumps — the queue's observer calls it on every job change, so it
// wakes when a build ends or a worker takes one off the queue. stop() (and the destructor)
// ends the thread: the prefetch that runs and those that wait finish 503. It must run
// before the JobQueue goes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/build/build.hpp"
#include "core/base/error.hpp"
#include "core/jobs/jobs.hpp"
#include "core/request/request.hpp"

namespace kforge::core {

class Prefetcher {
 public:
  static constexpr size_t kMaxWaiting = 8;  // prefetches accepted while one runs

  struct Entry {
    KernelRequest req;
    std::string label;
  };
  // What the prefetch thread asks of the service.
  struct Hooks {
    // Submits a planned miss to the queue as POST /kernels would; `prefetch` is the job of
    // the prefetch it is part of.
    std::function<Result<JobQueue::Submitted>(const Entry&, const BuildPlan&, const Job& prefetch,
                                              const std::string& client)>
        submit;
    // An entry answered from the cache.
    std::function<void(const BuildPlan&, const std::string& client)> hit;
    // A cache outcome to count: "hit" for a cached compile error, "joined".
    std::function<void(const char* outcome)> cache_outcome;
    // An error as the problem document (RFC 7807) a client of POST /kernels would get.
    std::function<nlohmann::json(const Error&)> problem;
  };

  Prefetcher(Builder& builder, JobQueue& jobs, Hooks hooks);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Starts a job of `info` (queued until the thread takes it) for `entries`, each already
  // validated; kOverloaded when kMaxWaiting prefetches wait already or the thread stopped.
  Result<std::shared_ptr<Job>> enqueue(nlohmann::json info, std::vector<Entry> entries, std::string client);
  void wake();  // something changed in the job queue
  void stop();  // joins the thread; idempotent

 private:
  struct Task {
    std::shared_ptr<Job> job;
    std::vector<Entry> entries;
    std::string client;
  };
  struct Progress;
  void loop();
  void run(Task& t);

  Builder& builder_;
  JobQueue& jobs_;
  Hooks hooks_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t changes_ = 0;  // bumped by wake(): the thread's wake-up
  bool stopping_ = false;
  std::deque<Task> waiting_;
  std::thread thread_;
};

}  // namespace kforge::core
