#include "core/storage/storage.hpp"

#include <utility>

namespace kforge::core::storage {

namespace {
constexpr size_t kMaxQueued = 4096;  // keys waiting for the repair thread; more are dropped (checked later)
constexpr auto kGenerationCheck = std::chrono::seconds(2);
}  // namespace

Storage::Storage(DiskTier& local, Tier* shared) : local_(local), shared_(shared) {
  if (shared_) repairer_ = std::jthread([this](std::stop_token stop) { repair_main(stop); });
}

Storage::~Storage() {
  if (repairer_.joinable()) {
    repairer_.request_stop();
    queue_cv_.notify_all();
  }
}

std::shared_ptr<const nlohmann::json> Storage::find(const std::string& key, bool polling) {
  if (auto m = local_.lookup(key)) {
    served(key, /*now=*/true);
    return m;
  }
  if (!shared_) return nullptr;
  auto entry = shared_->get(key, polling);
  if (!entry || !local_.put(*entry)) return nullptr;
  return local_.lookup(key);
}

std::optional<std::string> Storage::find_request(const std::string& request_key, bool local_only) {
  if (auto key = local_.lookup_request(request_key)) return key;
  if (local_only || !shared_) return std::nullopt;
  auto key = shared_->get_request(request_key);
  if (key) (void)local_.put_request(request_key, *key);
  return key;
}

Result<void> Storage::remember_request(const std::string& request_key, const std::string& key) {
  if (shared_) (void)shared_->put_request(request_key, key);
  if (!local_.put_request(request_key, key))
    return fail(ErrorKind::kInternal, "cannot write the request pointer " + request_key + " in " + local_.root().string());
  return {};
}

Result<nlohmann::json> Storage::publish(const std::filesystem::path& staging, const std::string& key,
                                        nlohmann::json manifest) {
  auto published = local_.publish(staging, key, std::move(manifest));
  if (published) share(*published);
  return published;
}

void Storage::share(const nlohmann::json& manifest) {
  if (!shared_) return;
  const std::string key = manifest.value("key", "");
  DiskTier::Pin pin(local_, key);  // its files are read below
  if (auto entry = local_.get(key); entry && shared_->put(*entry)) shared_known_.put(key, generation_.load());
}

bool Storage::known_shared(const std::string& key) const {
  if (!shared_) return true;
  const auto n = shared_known_.get(key);
  return n && *n == generation_.load();
}

void Storage::served(const std::string& key, bool now) {
  if (known_shared(key) || !shared_->available()) return;
  if (now) return repair(key);
  {
    std::lock_guard lock(queue_mu_);
    if (queue_.size() >= kMaxQueued) return;
    queue_.push_back(key);
  }
  queue_cv_.notify_one();
}

void Storage::repair(const std::string& key) {
  const uint64_t generation = generation_.load();
  if (!shared_->available()) return;  // down: checked again once it is back
  checked_++;
  if (!shared_->has(key)) {
    DiskTier::Pin pin(local_, key);  // its files are read below
    auto entry = local_.get(key);
    if (!entry || !shared_->put(*entry)) return;  // gone here too, not shareable, or the tier is down
    repaired_++;
  }
  shared_known_.put(key, generation);
}

void Storage::check_generation() {
  auto name = shared_->generation();
  if (!name || name == generation_name_) return;
  const bool first = !generation_name_;
  generation_name_ = std::move(name);
  if (first) return;  // what this instance started with: nothing was lost since
  generation_++;  // every entry counts as unchecked again
  generations_++;
  std::lock_guard lock(queue_mu_);
  resync_ = true;
}

void Storage::repair_main(std::stop_token stop) {
  auto next_check = std::chrono::steady_clock::now();
  while (!stop.stop_requested()) {
    if (std::chrono::steady_clock::now() >= next_check) {
      check_generation();
      next_check = std::chrono::steady_clock::now() + kGenerationCheck;
    }
    std::string key;
    bool resync = false;
    {
      std::unique_lock lock(queue_mu_);
      queue_cv_.wait_until(lock, stop, next_check, [&] { return !queue_.empty() || resync_; });
      if (stop.stop_requested()) return;
      resync = std::exchange(resync_, false);
      if (!resync && !queue_.empty()) {
        key = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (resync) {
      // The shared tier lost what it held: put back everything this instance has.
      for (const auto& k : local_.keys()) {
        if (stop.stop_requested()) return;
        if (!known_shared(k)) repair(k);
      }
    } else if (!key.empty()) {
      repair(key);
    }
  }
}

std::optional<nlohmann::json> Storage::find_autotune(const std::string& autotune_key) {
  if (auto j = local_.get_autotune(autotune_key)) return j;
  if (!shared_) return std::nullopt;
  auto j = shared_->get_autotune(autotune_key);
  if (j) (void)local_.put_autotune(autotune_key, *j);
  return j;
}

void Storage::remember_autotune(const std::string& autotune_key, const nlohmann::json& ranking) {
  (void)local_.put_autotune(autotune_key, ranking);
  if (shared_) (void)shared_->put_autotune(autotune_key, ranking);
}

}  // namespace kforge::core::storage
