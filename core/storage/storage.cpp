#include "core/storage/storage.hpp"

namespace kforge::core::storage {

std::shared_ptr<const nlohmann::json> Storage::find(const std::string& key, bool polling) {
  if (auto m = local_.lookup(key)) return m;
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
  if (auto entry = local_.get(key)) (void)shared_->put(*entry);
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
