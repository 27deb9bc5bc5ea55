// The storage wing's one door (ccache's storage/storage.hpp is the model): the rest of
// kforge asks it for an entry, a request pointer or an autotune ranking by key and never
// learns which tier answered or where a tier keeps it.
//
// Tiers (core/storage/tier.hpp): the local disk tier, always; a shared tier (Redis) in a
// cluster. A get asks the local tier, then the shared one, and copies what the shared tier
// had into the local one (verified, published like a local build) before answering; a
// put goes to both. The shared tier failing costs a miss or an unshared entry, never an
// error: only the local tier's failures are errors.
//
// The local tier itself (DiskTier) stays reachable for what only it does: pins, the hit
// path's memos, upkeep (eviction, gc, verify, export and import).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/storage/disk_tier.hpp"
#include "core/storage/tier.hpp"

namespace kforge::core::storage {

class Storage {
 public:
  // `shared` may be null (a single instance).
  explicit Storage(DiskTier& local, Tier* shared = nullptr) : local_(local), shared_(shared) {}

  DiskTier& local() { return local_; }
  Tier* shared() const { return shared_; }

  // The verified manifest of entry `key`: the local tier's, else the shared tier's copied in
  // first; null when neither has all of it. `polling`: asked again while another instance
  // builds it (not counted as a miss).
  std::shared_ptr<const nlohmann::json> find(const std::string& key, bool polling = false);
  // The kernel key a request key points at; the shared tier's pointer is copied in.
  // `local_only`: the shared tier is not asked (an event loop never waits on the network).
  std::optional<std::string> find_request(const std::string& request_key, bool local_only = false);
  // Remembers the pointer in every tier; an Error when the local tier cannot write it.
  Result<void> remember_request(const std::string& request_key, const std::string& key);

  // Publishes a staged entry (DiskTier::publish) and shares what was published. Returns
  // the manifest now published (another writer's, if it won the race).
  Result<nlohmann::json> publish(const std::filesystem::path& staging, const std::string& key,
                                 nlohmann::json manifest);

  // Autotune rankings by autotune key: the local tier's, else the shared tier's copied in.
  std::optional<nlohmann::json> find_autotune(const std::string& autotune_key);
  void remember_autotune(const std::string& autotune_key, const nlohmann::json& ranking);

 private:
  void share(const nlohmann::json& manifest);

  DiskTier& local_;
  Tier* shared_;
};

}  // namespace kforge::core::storage
