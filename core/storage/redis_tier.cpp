#include "core/storage/redis_tier.hpp"

#include <random>

#include "core/base/hash.hpp"
#include "core/base/log.hpp"

namespace kforge::core::storage {

RedisTier::RedisTier(Redis& redis, uint64_t max_blob, std::function<int64_t()> now_seconds)
    : redis_(redis), max_blob_(max_blob), now_seconds_(std::move(now_seconds)) {}

RedisTierCounters RedisTier::counters() const {
  return {hits_.load(), misses_.load(), puts_.load(), corrupt_.load(), too_big_.load()};
}

std::optional<Entry> RedisTier::get(const std::string& key, bool polling) {
  auto m = redis_.command({"GET", Redis::key("manifest", key)});
  if (!m || !m->ok() || m->nil()) {
    if (m && !polling) misses_++;
    return std::nullopt;
  }
  Entry e{nlohmann::json::parse(m->str, nullptr, false), {}};
  const nlohmann::json& manifest = e.manifest;
  if (manifest.is_discarded() || !manifest.is_object() || manifest.value("key", "") != key ||
      !manifest.contains("files") || !manifest["files"].is_object()) {
    corrupt_++;
    redis_.command({"DEL", Redis::key("manifest", key)});
    return std::nullopt;
  }
  for (const auto& [name, f] : manifest["files"].items()) {
    const std::string sha = f.is_object() ? f.value("sha256", "") : "";
    if (!is_hex_key(sha)) {
      corrupt_++;
      return std::nullopt;
    }
    auto blob = redis_.command({"GET", Redis::key("blob", sha)});
    if (!blob || !blob->ok() || blob->nil()) {  // evicted since: a miss
      if (blob) misses_++;
      return std::nullopt;
    }
    if (sha256_hex(blob->str) != sha || blob->str.size() != f.value("bytes", uint64_t{0})) {
      log::error("redis_corrupt", "redis blob " + sha + " of " + key + " is corrupt; deleted, not used")
          .str("blob", sha)
          .str("key", key);
      corrupt_++;
      redis_.command({"DEL", Redis::key("blob", sha)});
      return std::nullopt;
    }
    e.files.emplace(name, std::move(blob->str));
  }
  hits_++;
  return e;
}

bool RedisTier::put(const Entry& entry) {
  const nlohmann::json& manifest = entry.manifest;
  for (const auto& [name, f] : manifest["files"].items()) {
    if (f.value("bytes", uint64_t{0}) > max_blob_) {
      too_big_++;
      return false;  // not shared: other instances build it themselves
    }
  }
  for (const auto& [name, f] : manifest["files"].items()) {  // blobs first, then the manifest
    const auto bytes = entry.files.find(name);
    if (bytes == entry.files.end()) return false;
    auto r = redis_.command({"SET", Redis::key("blob", f.value("sha256", "")), bytes->second, "NX"});
    if (!r || !r->ok()) return false;
  }
  std::vector<std::string> set = {"SET", Redis::key("manifest", entry.key()), manifest.dump()};
  if (manifest.contains("expires_at")) {  // a cached compile error lives as long there as here
    const int64_t left_s = manifest["expires_at"].get<int64_t>() - now_seconds_();
    if (left_s <= 0) return false;
    set.insert(set.end(), {"PX", std::to_string(left_s * 1000)});
  }
  auto r = redis_.command(set);
  if (!r || !r->ok()) return false;
  puts_++;
  return true;
}

bool RedisTier::has(const std::string& key) {
  auto m = redis_.command({"GET", Redis::key("manifest", key)});
  if (!m || !m->ok() || m->nil()) return false;
  auto manifest = nlohmann::json::parse(m->str, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object() || !manifest.contains("files") || !manifest["files"].is_object())
    return false;
  for (const auto& [name, f] : manifest["files"].items()) {
    auto r = redis_.command({"EXISTS", Redis::key("blob", f.is_object() ? f.value("sha256", "") : "")});
    if (!r || !r->ok() || r->integer == 0) return false;
  }
  return true;
}

void RedisTier::remove(const std::string& key) { redis_.command({"DEL", Redis::key("manifest", key)}); }

std::optional<std::string> RedisTier::get_request(const std::string& rkey) {
  auto r = redis_.command({"GET", Redis::key("request", rkey)});
  if (!r || !r->ok() || r->nil() || !is_hex_key(r->str)) return std::nullopt;
  return r->str;
}

bool RedisTier::put_request(const std::string& rkey, const std::string& key) {
  auto r = redis_.command({"SET", Redis::key("request", rkey), key});
  return r && r->ok();
}

std::optional<nlohmann::json> RedisTier::get_autotune(const std::string& akey) {
  auto r = redis_.command({"GET", Redis::key("autotune", akey)});
  if (!r || !r->ok() || r->nil()) return std::nullopt;
  auto j = nlohmann::json::parse(r->str, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("autotune_key", "") != akey) return std::nullopt;
  return j;
}

bool RedisTier::put_autotune(const std::string& akey, const nlohmann::json& ranking) {
  auto r = redis_.command({"SET", Redis::key("autotune", akey), ranking.dump()});
  return r && r->ok();
}

std::optional<std::string> RedisTier::generation() {
  const std::string key = "kforge:v1:generation";
  auto r = redis_.command({"GET", key});
  if (!r || !r->ok()) return std::nullopt;
  if (!r->nil()) return r->str;
  // None: a fresh (or emptied) Redis. The first instance to ask names the generation.
  std::random_device rd;
  const std::string mine = std::to_string(rd()) + std::to_string(rd());
  redis_.command({"SET", key, mine, "NX"});
  r = redis_.command({"GET", key});
  if (!r || !r->ok() || r->nil()) return std::nullopt;
  return r->str;
}

nlohmann::json RedisTier::to_json() const {
  const RedisTierCounters c = counters();
  return {{"url", redis_.url().redacted()},
          {"up", redis_.up()},
          {"max_blob", max_blob_},
          {"last_error", redis_.last_error()},
          {"counters",
           {{"hits", c.hits}, {"misses", c.misses}, {"puts", c.puts}, {"errors", redis_.errors()},
            {"corrupt", c.corrupt}, {"too_big", c.too_big}}}};
}

}  // namespace kforge::core::storage
