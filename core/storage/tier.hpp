// A storage tier: one place where kforge keeps what it has built, behind the interface the
// Storage facade (core/storage/storage.hpp) speaks to every tier in the same words. A tier
// holds three kinds of things, each content-addressed or a function of its key, so a copy
// in another tier is never stale:
//   - entries: a kernel's manifest and the bytes of every file it lists (by the kernel key);
//   - request pointers: request key -> kernel key (the memo that answers a repeated request
//     without rendering);
//   - autotune rankings: autotune key -> the measured ranking of a template's choices.
// The disk tier (disk_tier.hpp) is the local one every instance has; the Redis tier
// (redis_tier.hpp) is shared by a cluster. Nothing outside core/storage/ needs to know how
// a tier lays things out.
//
// A tier fails soft: a get that cannot be answered (absent, corrupt, the tier unreachable)
// is nullopt, a put that cannot be made is false, and the caller goes on without it; a tier
// that finds a corrupt copy drops it. Implementations are thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kforge::core::storage {

// An entry as it travels between tiers: its manifest ("key", "files": {name: {"sha256",
// "bytes"}}, ...) and the bytes of each file it lists, which match those hashes.
struct Entry {
  nlohmann::json manifest;
  std::map<std::string, std::string> files;
  const std::string& key() const { return manifest["key"].get_ref<const std::string&>(); }
};

class Tier {
 public:
  virtual ~Tier() = default;
  virtual const char* name() const = 0;  // "disk", "redis": for logs and metrics

  // The whole entry, every file verified against the manifest; nullopt when the tier does
  // not have all of it. `polling`: asked again while another instance builds it (its
  // absence is expected, not a miss to count).
  virtual std::optional<Entry> get(const std::string& key, bool polling = false) = 0;
  // Stores a whole entry (the files before the manifest, so that no reader meets a manifest
  // whose files are not there yet). False when the tier did not take it.
  virtual bool put(const Entry& entry) = 0;
  // Whether the tier has the entry and every file it lists, without reading the files.
  virtual bool has(const std::string& key) = 0;
  virtual void remove(const std::string& key) = 0;

  virtual std::optional<std::string> get_request(const std::string& request_key) = 0;
  virtual bool put_request(const std::string& request_key, const std::string& key) = 0;

  virtual std::optional<nlohmann::json> get_autotune(const std::string& autotune_key) = 0;
  virtual bool put_autotune(const std::string& autotune_key, const nlohmann::json& ranking) = 0;

  // Names what the tier holds now: it changes when the tier may have lost entries (a Redis
  // restarted empty), and is nullopt when the tier cannot say (down). A tier that never
  // loses anything on its own (the disk) answers the same name forever.
  virtual std::optional<std::string> generation() { return std::string("stable"); }
  // Whether the tier answered lately (false: a call now would fail fast).
  virtual bool available() { return true; }
};

}  // namespace kforge::core::storage
