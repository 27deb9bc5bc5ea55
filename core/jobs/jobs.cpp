#include "core/jobs/jobs.hpp"

#include <cstdio>

namespace kforge::core {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kCompiling:
      return "compiling";
    case JobState::kBenchmarking:
      return "benchmarking";
    case JobState::kDone:
      return "done";
    case JobState::kFailed:
      return "failed";
  }
  return "unknown";
}

Job::Job(std::string id, nlohmann::json info, Observer observer)
    : id_(std::move(id)), observer_(std::move(observer)), info_(std::move(info)) {
  const double now = unix_now();
  info_["created_at"] = now;
  phases_["queued"] = now;
}

void Job::changed(std::unique_lock<std::mutex>& lock) {
  ++version_;
  lock.unlock();
  cv_.notify_all();
  if (observer_) observer_(*this);
}

void Job::set_state(JobState s) {
  std::unique_lock lock(mu_);
  if (state_ == s || state_ == JobState::kDone || state_ == JobState::kFailed) return;
  state_ = s;
  phases_[job_state_name(s)] = unix_now();
  changed(lock);
}

void Job::set_info(const std::string& field, nlohmann::json value) {
  std::unique_lock lock(mu_);
  info_[field] = std::move(value);
  changed(lock);
}

void Job::finish(int http_status, nlohmann::json body, std::string cache) {
  std::unique_lock lock(mu_);
  if (state_ == JobState::kDone || state_ == JobState::kFailed) return;
  state_ = http_status >= 200 && http_status < 300 ? JobState::kDone : JobState::kFailed;
  phases_[job_state_name(state_)] = unix_now();
  http_status_ = http_status;
  body_ = std::move(body);
  cache_ = std::move(cache);
  changed(lock);
}

bool Job::finished() const {
  std::lock_guard lock(mu_);
  return state_ == JobState::kDone || state_ == JobState::kFailed;
}

int Job::http_status() const {
  std::lock_guard lock(mu_);
  return http_status_;
}

nlohmann::json Job::body() const {
  std::lock_guard lock(mu_);
  return body_;
}

nlohmann::json Job::to_json(bool with_result) const {
  std::lock_guard lock(mu_);
  nlohmann::json j = info_;
  j["id"] = id_;
  j["state"] = job_state_name(state_);
  j["phases"] = phases_;
  j["cache"] = cache_.empty() ? nlohmann::json(nullptr) : nlohmann::json(cache_);
  j["http_status"] = http_status_ ? nlohmann::json(http_status_) : nlohmann::json(nullptr);
  j["error"] = nullptr;
  if (state_ == JobState::kFailed && body_.is_object()) {
    j["error"] = {{"type", body_.value("type", "")},
                  {"title", body_.value("title", "")},
                  {"detail", body_.value("detail", "")},
                  {"status", http_status_}};
  }
  if (with_result) j["result"] = body_;
  return j;
}

bool Job::wait_until(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mu_);
  return cv_.wait_until(lock, deadline,
                        [&] { return state_ == JobState::kDone || state_ == JobState::kFailed; });
}

uint64_t Job::wait_change(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return version_ > seen; });
  return version_;
}

uint64_t Job::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

JobQueue::JobQueue(JobQueueConfig config, Job::Observer observer)
    : config_(config), observer_(std::move(observer)) {
  if (config_.workers == 0) config_.workers = 1;
  for (size_t i = 0; i < config_.workers; ++i) threads_.emplace_back([this] { worker(); });
}

JobQueue::~JobQueue() {
  std::deque<Pending> left;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  for (auto& p : left) {
    p.job->finish(503,
                  {{"type", "/problems/unavailable"},
                   {"title", "Service Unavailable"},
                   {"status", 503},
                   {"detail", "the service is shutting down"}},
                  "");
  }
  for (auto& t : threads_) t.join();
}

std::shared_ptr<Job> JobQueue::make_job(nlohmann::json info) {
  char id[32];
  std::snprintf(id, sizeof id, "j%06llu", static_cast<unsigned long long>(next_id_++));
  auto job = std::make_shared<Job>(config_.instance.empty() ? std::string(id) : id + ("-" + config_.instance),
                                   std::move(info), observer_);
  history_.push_front(job);
  by_id_[job->id()] = job;
  while (history_.size() > config_.history) {
    by_id_.erase(history_.back()->id());
    history_.pop_back();
  }
  return job;
}

Result<JobQueue::Submitted> JobQueue::submit(nlohmann::json info, const std::string& flight,
                                             Work work) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(mu_);
    if (!flight.empty()) {
      if (auto it = in_flight_.find(flight); it != in_flight_.end()) {
        // A job that has just finished is not joined: its answer may be a failure that
        // the caller is retrying (a killed compiler), and the cache answers successes.
        if (!it->second->finished()) {
          ++joins_;
          return Submitted{it->second, true};
        }
        in_flight_.erase(it);
      }
    }
    if (stopping_) return fail(ErrorKind::kOverloaded, "the service is shutting down");
    if (queue_.size() >= config_.max_queue) {
      return fail(ErrorKind::kOverloaded, "the build queue is full (" +
                                              std::to_string(config_.max_queue) + " jobs waiting)");
    }
    job = make_job(std::move(info));
    if (!flight.empty()) in_flight_[flight] = job;
    queue_.push_back({job, flight, std::move(work)});
  }
  cv_.notify_one();
  if (observer_) observer_(*job);
  return Submitted{job, false};
}

std::shared_ptr<Job> JobQueue::start(nlohmann::json info) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(mu_);
    job = make_job(std::move(info));
  }
  return job;
}

Result<void> JobQueue::reserve(size_t n) const {
  std::lock_guard lock(mu_);
  if (queue_.size() + n > config_.max_queue) {
    return fail(ErrorKind::kOverloaded,
                "the build queue has room for " +
                    std::to_string(config_.max_queue - std::min(config_.max_queue, queue_.size())) +
                    " jobs, " + std::to_string(n) + " asked");
  }
  return {};
}

void JobQueue::worker() {
  for (;;) {
    Pending p;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      p = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
    }
    try {
      p.work(*p.job);
    } catch (const std::exception& e) {
      p.job->finish(500,
                    {{"type", "/problems/internal-error"},
                     {"title", "Internal Server Error"},
                     {"status", 500},
                     {"detail", std::string("internal error: ") + e.what()}},
                    "");
    }
    if (!p.job->finished()) {
      p.job->finish(500,
                    {{"type", "/problems/internal-error"},
                     {"title", "Internal Server Error"},
                     {"status", 500},
                     {"detail", "the job ended without an answer"}},
                    "");
    }
    std::lock_guard lock(mu_);
    --busy_;
    if (auto it = in_flight_.find(p.flight); it != in_flight_.end() && it->second == p.job) in_flight_.erase(it);
  }
}

std::shared_ptr<Job> JobQueue::find(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.lock();
}

std::vector<std::shared_ptr<Job>> JobQueue::recent(size_t limit) const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Job>> out;
  for (const auto& j : history_) {
    if (out.size() >= limit) break;
    out.push_back(j);
  }
  return out;
}

size_t JobQueue::depth() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

size_t JobQueue::busy() const {
  std::lock_guard lock(mu_);
  return busy_;
}

uint64_t JobQueue::joins() const {
  std::lock_guard lock(mu_);
  return joins_;
}

}  // namespace kforge::core
