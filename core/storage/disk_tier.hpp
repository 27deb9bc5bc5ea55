// The content-addressed kernel cache, disk tier (DESIGN §5): the local tier of
// core/storage/storage.hpp, and the only code that knows how an entry lies on disk.
//
// Layout, as a grammar:
//   root        := <root>/v1/ (objects | requests | families | autotune | tmp)
//   objects     := objects/<key[0:2]>/<key>/ entry
//   entry       := manifest.json kernel.so [kernel.o] source.<ext> compile.log side*
//                | manifest.json source.<ext> compile.log            (negative entry: status
//                "failed")
//   side        := bench/<result>.json      a benchmark result (bench_result(); <result> is
//                                           [0-9a-f-]{1,64}: the device digest, and the
//                                           tensors' where they are the caller's)
//                | autotune.json            the ranking the entry took part in (ranking())
//                  written after publishing, not in the manifest's files: not verified, not
//                  shared, gone with the entry
//   requests    := requests/<rkey[0:2]>/<rkey>     one line: the kernel key it resolves to
//   autotune    := autotune/<akey[0:2]>/<akey>.json  a ranking (get_autotune()); not evicted
//   families    := families/<fam[0:2]>/<fam>/<key>  empty: <key> is an entry of the kernel
//                  family <fam> (manifest "family", 32 hex; core/build/why.hpp), an index for
//                  "why did this miss" that gc keeps in step with objects/
//   tmp         := tmp/proc.<pid>.<nonce>/ (.lock | build.<n>/ | trash.<n>/ | *.ref)
//                  one staging directory per live process, held by flock on .lock; a
//                  directory whose lock is free belongs to a dead process and is garbage
//   key, rkey   := 64 lowercase hex characters
// manifest.json := {"format": 1, "key", "status": "ok"|"failed", "created_at" (unix s),
//                   "expires_at" (negative entries), "files": {name: {"sha256", "bytes"}}, ...}
//
// Publishing builds the whole entry in tmp/, fsyncs it and renames the directory into
// place, so a reader sees a complete entry or none; when two writers race, the first
// rename wins and the loser's copy is discarded. lookup() checks every file against the
// manifest: a mismatch (or an expired negative entry) removes the entry and reads as a
// miss, so a corrupt artifact is never served. Removal renames the entry into tmp/ before
// deleting it, so it disappears atomically.
//
// Verification is memoised per file identity (device, inode, size, mtime, ctime): a file
// is hashed when the store first meets it and again only once its identity changes, which
// any write to it does (ctime cannot be set back). A file changed less than a second
// before it was hashed is not memoised, since a second write within the file system's
// timestamp granularity could leave its identity as it was (git's "racy clean" problem).
// What the memo cannot see is a byte flipped beneath the file system (bit rot): `kforge
// cache verify` (verify_all) re-hashes everything, whatever the memo says.
//
// Upkeep: a hit refreshes the entry's recency (the mtime of its directory, at most once
// a minute, so that a hit writes nothing to the disk most of the time); evict() drops
// the least recently used entries until the cache fits, never one that is pinned (being
// served, built or benchmarked by this process). Several processes may share one root:
// each stages in its own locked directory, publishing is a rename, and removal a rename
// into the remover's own staging area.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"
#include "core/base/sharded_map.hpp"
#include "core/storage/tier.hpp"

namespace kforge::core::storage {

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
  uint64_t expired = 0, dangling_requests = 0, dangling_family_links = 0, staging_items = 0;
};

struct VerifyResult {
  uint64_t checked = 0;
  std::vector<std::string> removed;  // corrupt, unreadable or expired entries
};

class DiskTier final : public Tier {
 public:
  static constexpr int kFormat = 1;

  // Creates the directory tree if needed. Throws std::filesystem::filesystem_error when
  // the root cannot be created.
  explicit DiskTier(std::filesystem::path root);
  ~DiskTier() override;
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Tier (tier.hpp): get() reads every file through read_verified(); put() stages the files
  // and publishes them; has() is a verified lookup.
  const char* name() const override { return "disk"; }
  std::optional<Entry> get(const std::string& key, bool polling = false) override;
  bool put(const Entry& entry) override;
  bool has(const std::string& key) override { return lookup(key) != nullptr; }
  void remove(const std::string& key) override { remove_entry(key); }
  std::optional<std::string> get_request(const std::string& rkey) override { return lookup_request(rkey); }
  bool put_request(const std::string& rkey, const std::string& key) override;
  std::optional<nlohmann::json> get_autotune(const std::string& akey) override;
  bool put_autotune(const std::string& akey, const nlohmann::json& ranking) override;

  const std::filesystem::path& root() const { return root_; }
  // The directory of an entry: for core/storage/ and its tests only (the rest of kforge
  // reads entries through this class; tests/docs/check_layers.py holds it to that).
  std::filesystem::path entry_dir(const std::string& key) const;
  // A file of an entry as a path relative to the root ("v1/objects/..."): what a server in
  // front that maps the root (nginx's X-Accel-Redirect) is told to send.
  std::string relative_path(const std::string& key, const std::string& name) const;
  // The path of a verified entry's kernel.so, for a program that loads it itself (a
  // benchmark runner); the entry must be pinned while the path is used.
  std::filesystem::path artifact_path(const std::string& key) const { return entry_dir(key) / "kernel.so"; }

  // Side files of an entry (the grammar's `side`): benchmark results by name, and the
  // autotune ranking it took part in. Not verified; false/nullopt when the entry is gone or
  // the name is not a result name.
  std::optional<nlohmann::json> bench_result(const std::string& key, const std::string& result) const;
  bool put_bench_result(const std::string& key, const std::string& result, const nlohmann::json& value);
  nlohmann::json bench_results(const std::string& key) const;  // {result: value}
  std::optional<nlohmann::json> ranking(const std::string& key) const;
  bool put_ranking(const std::string& key, const nlohmann::json& ranking);
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
  // The verified manifest, or null (absent, corrupt, expired negative; the entry is then
  // removed). Shared: the same object for every hit until the entry changes on disk.
  std::shared_ptr<const nlohmann::json> lookup(const std::string& key);
  // The bytes of one file of a verified entry, read through a descriptor whose identity is
  // checked against the verified one (or hashed now): what it returns matches the manifest.
  // nullopt when the entry or file is missing or corrupt (a corrupt entry is removed).
  // Checks only that file's identity against the memo (what is read is all that matters),
  // so an entry changed elsewhere is verified again in full first.
  std::optional<std::string> read_verified(const std::string& key, const std::string& name);
  // The bytes of a file read_verified() served lately and kept in memory, when the file
  // still has the identity they were verified at (one stat); null otherwise (then
  // read_verified()). Never reads or hashes a file.
  std::shared_ptr<const std::string> read_hot(const std::string& key, const std::string& name);
  // The verified manifest from the memo alone, nothing on disk looked at; null when not
  // memoised (then lookup()). For a reader that goes on to read_verified().
  std::shared_ptr<const nlohmann::json> memo_manifest(const std::string& key) const;
  // The manifest as it is on disk, checked (format, key, expiry) but its files not hashed:
  // for reading what an entry was made of, never for serving it.
  std::optional<nlohmann::json> peek_manifest(const std::string& key) { return read_manifest(key); }
  // The entries of the kernel family `family` that are still there, newest first (by when
  // they were published, in ns), at most `limit`.
  struct FamilyMember {
    std::string key;
    int64_t published_ns = 0;
  };
  std::vector<FamilyMember> family_members(const std::string& family, size_t limit) const;
  // When an entry was published (its manifest's mtime, ns); nullopt when it is not there.
  std::optional<int64_t> published_ns(const std::string& key) const;
  // Whether this process removed the entry because it was corrupt, malformed or expired
  // (recently: a bounded memory), as opposed to never having had it.
  bool discarded(const std::string& key) const;
  void remove_entry(const std::string& key);
  // Marks a hit: the entry becomes the most recently used (written at most once a minute).
  void touch(const std::string& key);

  // While a Pin lives, evict() leaves its entry alone.
  class Pin {
   public:
    Pin(DiskTier& store, std::string key);
    ~Pin();
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;

   private:
    DiskTier& store_;
    std::string key_;
  };
  bool pinned(const std::string& key) const;

  CacheStats stats() const;
  // Removes least recently used entries until the cache holds at most `target_bytes`;
  // nothing when it holds no more than `only_above` (one scan either way).
  EvictResult evict(uint64_t target_bytes, uint64_t only_above = 0);
  // Re-hashes every file of every entry, memo or not; drops the entries that fail (and
  // expired negatives).
  VerifyResult verify_all();
  // Removes what nothing needs: expired negative entries, request pointers whose kernel
  // is gone, and staging left by dead processes.
  GcResult collect_garbage();

  // The published entries a page of a list shows (GET /kernels, the status page's Kernels
  // view): the summary fields of each manifest, read unverified (as peek_manifest()) and
  // memoised per manifest identity, so a listing costs a directory walk and one stat per
  // entry once the manifests were read. Newest first (created_at, then key); an expired
  // negative entry is not listed. Filters: a key prefix, a substring of the kernel name
  // (case-insensitive), the template name ("" selects source-mode kernels), backend, status;
  // paging: `limit` entries after the entry `after` names (a cursor: "<created_at>.<key>").
  struct Summary {
    std::string key, kernel_name, backend, template_name, status;
    std::vector<std::string> archs;
    int64_t created_at = 0;
    uint64_t bytes = 0;  // the manifest's files
    nlohmann::json to_json() const;
  };
  struct ListQuery {
    std::string key_prefix, name, backend, status;
    std::optional<std::string> template_name;
    size_t limit = 50;
    std::string after;  // a cursor from the previous page; "" for the first
  };
  struct ListPage {
    std::vector<Summary> entries;
    uint64_t total = 0;  // entries that pass the filters
    std::string next;    // the cursor of the next page; "" on the last
  };
  ListPage list(const ListQuery& query) const;
  static std::string cursor_of(const Summary& s);

  std::optional<std::string> lookup_request(const std::string& rkey);
  // What is on disk now, unverified (for export, core/cache_archive.hpp): every published
  // entry's key, and every request pointer as (rkey, kernel key).
  std::vector<std::string> keys() const;
  std::vector<std::pair<std::string, std::string>> request_pointers();

  // The store's clocks run this much ahead of the system's: a seam for tests, which move
  // time (expiry, recency, the one-second window in which a changed file's identity cannot
  // be trusted, the tenth of a second a memo is trusted) instead of waiting for it. A
  // server takes it from KFORGE_TEST_CLOCK_OFFSET_MS (service/, tests only).
  void advance_clock(std::chrono::nanoseconds by) { clock_offset_ns_ += by.count(); }
  int64_t now_seconds() const;

 private:
  // What identifies a file's content without reading it.
  struct FileId {
    uint64_t dev = 0, ino = 0, size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const FileId&) const = default;
  };
  // An entry as it was verified: its manifest and the identity of every file then.
  struct Verified {
    std::shared_ptr<const nlohmann::json> manifest;
    FileId manifest_id;
    std::vector<std::pair<std::string, FileId>> files;
    std::atomic<int64_t> touched_at{0};  // when touch() last wrote its recency
    std::atomic<int64_t> checked_ns{0};  // when memoised() last found every identity unchanged
  };
  static std::optional<FileId> identify(const std::filesystem::path& path);
  static std::optional<FileId> identify(int fd);
  // The manifest parsed and checked (format, key, files, expiry), without hashing its files;
  // removes a malformed or expired entry.
  std::optional<nlohmann::json> read_manifest(const std::string& key);
  // Hashes every file of the entry and memoises what it verified; null and the entry removed
  // when a file fails.
  std::shared_ptr<Verified> verify_entry(const std::string& key);
  // The memo, when every file of the entry still has the identity it was verified with
  // (looked at again at most every 100 ms: an answer that names the entry reads none of
  // its bytes, and a reader of a file checks that file itself, read_verified()).
  std::shared_ptr<Verified> memoised(const std::string& key) const;
  bool racy(const FileId& id) const;  // changed too recently for its identity to be trusted

  std::filesystem::path root_;
  std::filesystem::path v1_;
  uint64_t drop_dangling_requests();
  uint64_t drop_dangling_family_links();
  // Adds a published entry to its family's index (when its manifest names one).
  void index_family(const nlohmann::json& manifest);
  ShardedMap<std::shared_ptr<Verified>> verified_{4096};
  ShardedMap<std::string> requests_memo_{65536};  // request key -> kernel key (a function)
  ShardedMap<bool> discarded_{1024};
  // The bytes of small files served lately, with the identity they were verified at: a
  // download whose file still has it (one stat) is answered from memory. At most 256
  // files of at most 256 KiB.
  struct HotFile {
    FileId id;
    std::string data;
  };
  static constexpr size_t kHotFileMax = 256 << 10;
  ShardedMap<std::shared_ptr<const HotFile>> hot_files_{256};
  void discard(const std::string& key);  // removes a bad entry, and remembers why
  // list()'s memo: an entry's summary, with the identity of the manifest it was read from.
  struct Listed {
    FileId manifest_id;
    Summary summary;
    int64_t expires_at = 0;  // negative entries
  };
  mutable ShardedMap<std::shared_ptr<const Listed>> listed_{65536};

  std::filesystem::path staging_;  // tmp/proc.<pid>.<nonce>, locked while we live
  int lock_fd_ = -1;
  // Pins by key, in shards (every download pins its entry: no one lock for all of them).
  struct PinShard {
    std::mutex mu;
    std::map<std::string, int> pins;
  };
  mutable std::array<PinShard, 16> pins_;
  PinShard& pin_shard(const std::string& key) const { return pins_[std::hash<std::string>{}(key) % pins_.size()]; }
  std::atomic<int64_t> clock_offset_ns_{0};
  int64_t wall_ns() const;    // system_clock, with the offset
  int64_t steady_ns() const;  // steady_clock, with the offset
};

}  // namespace kforge::core::storage
