// A string-keyed map for the hit path: split into shards, each behind its own
// reader-writer lock, so that readers never wait for each other and writers of different
// keys rarely meet. Bounded: a shard past its share of the capacity drops an arbitrary
// entry to make room, so it holds memos (values whose owner can compute them again),
// never the only copy of anything.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>

namespace kforge::core {

template <class V>
class ShardedMap {
 public:
  explicit ShardedMap(size_t capacity) : per_shard_(capacity / kShards + 1) {}

  std::optional<V> get(const std::string& key) const {
    const Shard& s = shard(key);
    std::shared_lock lock(s.mu);
    auto it = s.map.find(key);
    if (it == s.map.end()) return std::nullopt;
    return it->second;
  }

  void put(const std::string& key, V value) {
    Shard& s = shard(key);
    std::unique_lock lock(s.mu);
    make_room(s, key);
    s.map.insert_or_assign(key, std::move(value));
  }

  // The value under `key`, made with `make()` first if there is none (under the lock, once).
  template <class Make>
  V get_or_make(const std::string& key, Make&& make) {
    if (auto v = get(key)) return *v;
    Shard& s = shard(key);
    std::unique_lock lock(s.mu);
    if (auto it = s.map.find(key); it != s.map.end()) return it->second;
    make_room(s, key);
    return s.map.emplace(key, make()).first->second;
  }

  void erase(const std::string& key) {
    Shard& s = shard(key);
    std::unique_lock lock(s.mu);
    s.map.erase(key);
  }

  // f(key, value) for every entry, one shard at a time (a shard's writers wait meanwhile).
  template <class F>
  void for_each(F&& f) const {
    for (const Shard& s : shards_) {
      std::shared_lock lock(s.mu);
      for (const auto& [k, v] : s.map) f(k, v);
    }
  }

  size_t size() const {
    size_t n = 0;
    for (const Shard& s : shards_) {
      std::shared_lock lock(s.mu);
      n += s.map.size();
    }
    return n;
  }

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    mutable std::shared_mutex mu;
    std::unordered_map<std::string, V> map;
  };

  Shard& shard(const std::string& key) { return shards_[std::hash<std::string>{}(key) % kShards]; }
  const Shard& shard(const std::string& key) const {
    return shards_[std::hash<std::string>{}(key) % kShards];
  }
  void make_room(Shard& s, const std::string& key) const {
    if (s.map.size() >= per_shard_ && !s.map.contains(key)) s.map.erase(s.map.begin());
  }

  size_t per_shard_;
  std::array<Shard, kShards> shards_;
};

}  // namespace kforge::core
