// The content-addressed kernel cache, disk tier (DESIGN §5).
//
// Layout, as a grammar:
//   root        := <root>/v1/ (objects | requests | tmp)
//   objects     := objects/<key[0:2]>/<key>/ entry
//   entry       := manifest.json kernel.so [kernel.o] source.<ext> compile.log
//   [bench/<device>.json]
//                | manifest.json source.<ext> compile.log            (negative entry: status
//                "failed")
//   requests    := requests/<rkey[0:2]>/<rkey>     one line: the kernel key it resolves to
//   tmp         := tmp/proc.<pid>.<nonce>/ (.lock | build.<n>/ | trash.<n>/ | *.ref)
//                  one staging directory per live process, held by flock on .lock; a
//                  directory whose lock is free belongs to a dead process and is garbage
//   key, rkey   := 64 lowercase hex characters
// manifest.json := {"format": 1, "key", "status": "ok"|"failed", "created_at" (unix s),
//                   "expires_at" (negative entries), "files": {name: {"sha256", "bytes"}}, ...}
//
// Publishing builds the whole entry in tmp/, fsyncs it and renames the directory into
// place, so a reader sees a complete entry or none; when two writers race, the first
// rename wins and the loser's copy is discarded. lookup() re-hashes every file against
// the manifest: a mismatch (or an expired negative entry) removes the entry and reads as
// a miss, so a corrupt artifact is never served. Removal renames the entry into tmp/
// before deleting it, so it disappears atomically.
//
// Upkeep: a hit refreshes the entry's recency (the mtime of its manifest); evict() drops
// the least recently used entries until the cache fits, never one that is pinned (being
// served, built or benchmarked by this process). Several processes may share one root:
// each stages in its own locked directory, publishing is a rename, and removal a rename
// into the remover's own staging area.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace kforge::core {

struct CacheStats {
  uint64_t entries = 0;   // published kernels, negative ones included
  uint64_t negative = 0;  // cached compile errors
  uint64_t bytes = 0;     // every file under objects/
  uint64_t requests = 0;  // request-key pointers
  uint64_t staging_items = 0;
  nlohmann::json to_json() const;
};

struct EvictResult {
  uint64_t evicted = 0;
  uint64_t freed_bytes = 0;
  uint64_t kept_pinned = 0;  // old enough to go, but in use
  uint64_t bytes_after = 0;
};

struct GcResult {
  uint64_t expired = 0, dangling_requests = 0, staging_items = 0;
};

struct VerifyResult {
  uint64_t checked = 0;
  std::vector<std::string> removed;  // corrupt, unreadable or expired entries
};

class DiskStore {
 public:
  static constexpr int kFormat = 1;

  // Creates the directory tree if needed. Throws std::filesystem::filesystem_error when
  // the root cannot be created.
  explicit DiskStore(std::filesystem::path root);
  ~DiskStore();
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path entry_dir(const std::string& key) const;
  // This process's own staging directory (under tmp/).
  const std::filesystem::path& staging_root() const { return staging_; }

  // Deletes whatever a dead process left in tmp/ (and our own leftovers); returns how many
  // items it removed. Staging directories of live processes are left alone.
  size_t clear_staging();
  // A fresh, empty staging directory.
  Result<std::filesystem::path> make_staging();
  // Hashes the files in `staging`, adds "files", "format" and "key" to `manifest`, writes
  // manifest.json, fsyncs, and renames into place. Returns the manifest that is now
  // published (the other writer's, if it won the race).
  Result<nlohmann::json> publish(const std::filesystem::path& staging, const std::string& key,
                                 nlohmann::json manifest);
  // The verified manifest, or nullopt (absent, corrupt, expired negative).
  std::optional<nlohmann::json> lookup(const std::string& key);
  // The manifest alone, its files not re-hashed: for a caller that verifies the one file it
  // reads as it reads it (serving an artifact). Removes a malformed or expired entry.
  std::optional<nlohmann::json> manifest(const std::string& key);
  // Verifies one file of an entry against the manifest (used before serving it).
  bool verify_file(const std::string& key, const nlohmann::json& manifest, const std::string& name);
  void remove_entry(const std::string& key);
  // Marks a hit: the entry becomes the most recently used.
  void touch(const std::string& key);

  // While a Pin lives, evict() leaves its entry alone.
  class Pin {
   public:
    Pin(DiskStore& store, std::string key);
    ~Pin();
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;

   private:
    DiskStore& store_;
    std::string key_;
  };
  bool pinned(const std::string& key) const;

  CacheStats stats() const;
  // Removes least recently used entries until the cache holds at most `target_bytes`;
  // nothing when it holds no more than `only_above` (one scan either way).
  EvictResult evict(uint64_t target_bytes, uint64_t only_above = 0);
  // Re-hashes every file of every entry; drops the entries that fail (and expired negatives).
  VerifyResult verify_all();
  // Removes what nothing needs: expired negative entries, request pointers whose kernel
  // is gone, and staging left by dead processes.
  GcResult collect_garbage();

  std::optional<std::string> lookup_request(const std::string& rkey);
  Result<void> put_request(const std::string& rkey, const std::string& key);

  // The time source, a seam for tests of expiry.
  void set_clock(std::function<std::chrono::system_clock::time_point()> now) {
    now_ = std::move(now);
  }
  int64_t now_seconds() const;

 private:
  std::filesystem::path root_;
  std::filesystem::path v1_;
  uint64_t drop_dangling_requests();

  std::filesystem::path staging_;  // tmp/proc.<pid>.<nonce>, locked while we live
  int lock_fd_ = -1;
  mutable std::mutex pins_mu_;
  std::map<std::string, int> pins_;
  std::function<std::chrono::system_clock::time_point()> now_ = [] {
    return std::chrono::system_clock::now();
  };
};

}  // namespace kforge::core
