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
//
// Read-repair (docs/SCALING.md): whatever answers with an entry from the local tier says
// so (served()); an entry the shared tier lacks, or holds only in part (a manifest whose
// blob Redis evicted), is put back whole, blobs before manifest, once per entry in each of
// the shared tier's generations (Tier::generation(): a Redis restarted empty is a new one).
// A worker repairs before it answers, so a client that downloads next from another
// instance finds the entry; an event loop hands the key to the repair thread, which also
// re-shares the whole local tier, in the background, when it sees a new generation. So
// the cluster's URLs stay fetchable after Redis loses its data, and its hot set is shared
// again by the traffic itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"
#include "core/storage/disk_tier.hpp"
#include "core/storage/tier.hpp"

namespace kforge::core::storage {

class Storage {
 public:
  // `shared` may be null (a single instance); with one, a repair thread runs until the
  // destructor.
  explicit Storage(DiskTier& local, Tier* shared = nullptr);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

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

  // An answer names entry `key`, which the local tier has: make sure the shared tier has it
  // too. `now`: before returning (a worker thread); else queued (an event loop, which never
  // waits on the network). Cheap when the entry is known shared in this generation.
  void served(const std::string& key, bool now);
  // Whether the shared tier is known to hold entry `key` in its current generation (true
  // when there is no shared tier): an event loop answers only such entries, and leaves the
  // others to a worker, which repairs before it answers.
  bool known_shared(const std::string& key) const;

  struct RepairCounts {
    uint64_t checked = 0;      // entries looked for in the shared tier
    uint64_t repaired = 0;     // ... and put back there, whole
    uint64_t generations = 0;  // new generations of the shared tier seen (each re-shares the local tier)
  };
  RepairCounts repair_counts() const { return {checked_.load(), repaired_.load(), generations_.load()}; }

 private:
  void share(const nlohmann::json& manifest);
  void repair(const std::string& key);
  void repair_main(std::stop_token stop);
  void check_generation();

  DiskTier& local_;
  Tier* shared_;
  // Entries the shared tier had (or was given) in generation n: key -> n.
  ShardedMap<uint64_t> shared_known_{65536};
  std::atomic<uint64_t> generation_{0};
  std::optional<std::string> generation_name_;  // the repair thread's alone
  std::atomic<uint64_t> checked_{0}, repaired_{0}, generations_{0};
  std::mutex queue_mu_;
  std::condition_variable_any queue_cv_;
  std::deque<std::string> queue_;
  bool resync_ = false;  // re-share every local entry (a new generation)
  std::jthread repairer_;  // last: stops (and joins) before the members it uses go
};

}  // namespace kforge::core::storage
