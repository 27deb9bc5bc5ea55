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
//   tmp         := tmp/<anything>                  staging; never read, cleared at start
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
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace kforge::core {

class DiskStore {
 public:
  static constexpr int kFormat = 1;

  // Creates the directory tree if needed. Throws std::filesystem::filesystem_error when
  // the root cannot be created.
  explicit DiskStore(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path entry_dir(const std::string& key) const;
  std::filesystem::path staging_root() const { return v1_ / "tmp"; }

  // Deletes everything in tmp/; returns how many top-level items it removed.
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
  // Verifies one file of an entry against the manifest (used before serving it).
  bool verify_file(const std::string& key, const nlohmann::json& manifest, const std::string& name);
  void remove_entry(const std::string& key);

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
  std::function<std::chrono::system_clock::time_point()> now_ = [] {
    return std::chrono::system_clock::now();
  };
};

}  // namespace kforge::core
