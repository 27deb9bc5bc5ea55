// Export and import of cache entries as one archive (issue 16: air-gapped build farms).
// An export takes a snapshot of the chosen entries (hard links in this process's staging
// directory, so an eviction meanwhile takes nothing away from it) and writes it as a
// zstd-compressed tar through a caller's writer (a file, an HTTP stream). An import reads
// such an archive into a fresh staging directory, checks every member name against the
// grammar below and every file against the index and its manifest, and publishes through
// DiskTier::publish() only when all of it verified: a damaged or truncated archive
// imports nothing and names the entry that failed. Importing twice publishes nothing the
// second time (those entries are "present"). Neither throws for a bad archive or a full
// disk: those are Errors (kBadRequest naming the entries, kInternal). The hashes detect
// damage, not forgery: an archive is trusted as much as a build (the HTTP routes are
// admin-only).
//
// The archive, as a grammar (tar in pax format, every member a regular file, mode 0644
// or 0755, owner 0:0, mtime the entry's created_at):
//   archive   := zstd( tar( index entry* ) )
//   index     := member "kforge-export.json" (at most 64 MiB):
//                {"format": "kforge-cache-export", "version": 1, "created_at" (unix s),
//                 "kforge_version", "filters": {"since", "match": ["FIELD=GLOB"...]},
//                 "entries": [{"key", "created_at", "files": {NAME: {"sha256", "bytes"}}}...],
//                 "requests": {RKEY: KEY}}
//                "files" lists manifest.json and every file the manifest lists; "requests" are
//                request-key pointers whose kernel is an entry of this archive.
//   entry     := member "v1/objects/<key[0:2]>/<key>/manifest.json"
//                then "v1/objects/<key[0:2]>/<key>/<NAME>" for each other file of the entry
//                (entries in the index's order)
//   NAME      := PART ("/" PART)?       PART := [A-Za-z0-9_+-][A-Za-z0-9._+-]{0,127}
//   key, RKEY := 64 lowercase hex characters
// Only entries with status "ok" travel: negative entries are compile errors that expire in
// minutes. An imported manifest must have format 1, its directory's key, status "ok" and
// exactly the files the index lists, each with the sha256 and size that arrived.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"
#include "core/storage/disk_tier.hpp"

namespace kforge::core::storage {

// --since: unix seconds ("1718000000") or an ISO-8601 UTC date or time ("2024-06-10",
// "2024-06-10T12:00", "2024-06-10T12:00:00Z"). kBadRequest naming `field` otherwise.
Result<int64_t> parse_since(std::string_view text, const std::string& field = "/since");

// --match FIELD=GLOB (fnmatch(3) globs): FIELD is key, backend, kernel_name, arch (any of
// the entry's archs) or template (the template's name, the manifest's template.template; ""
// for source-mode kernels). A field that is "" matches only an empty glob.
struct ExportMatch {
  std::string field, glob;
  bool matches(const nlohmann::json& manifest) const;
};
Result<ExportMatch> parse_match(std::string_view text, const std::string& field = "/match");

struct ExportOptions {
  std::optional<int64_t> since;      // entries created at or after (manifest created_at)
  std::vector<ExportMatch> matches;  // every one must hold
  std::string kforge_version;        // written into the index
};

// The entries chosen for an export, hard-linked into a staging directory that the
// destructor removes.
class ExportSnapshot {
 public:
  // Walks the store: verified "ok" entries that pass the filters, and the request pointers
  // to them. Corrupt entries are dropped by the store's own lookup and not exported.
  static Result<std::unique_ptr<ExportSnapshot>> take(DiskTier& store, const ExportOptions& opts);
  ~ExportSnapshot();
  ExportSnapshot(const ExportSnapshot&) = delete;
  ExportSnapshot& operator=(const ExportSnapshot&) = delete;

  size_t entries() const { return index_["entries"].size(); }
  size_t requests() const { return index_["requests"].size(); }
  uint64_t bytes() const { return bytes_; }  // of the files, uncompressed
  const nlohmann::json& index() const { return index_; }

  // Writes the archive through `write` (false: the reader went away; the export stops).
  // kInternal when a file no longer matches its hash or the writer gave up.
  using Writer = std::function<bool(const char* data, size_t size)>;
  Result<uint64_t> write(const Writer& write) const;  // the archive's bytes
  // Writes the archive to `path` atomically (a temporary file beside it, renamed).
  Result<uint64_t> write_file(const std::filesystem::path& path) const;

 private:
  ExportSnapshot() = default;
  std::filesystem::path dir_;  // <staging>/<key>/<files>
  nlohmann::json index_;
  uint64_t bytes_ = 0;
};

struct ImportFailure {
  std::string key;  // the entry ("" for the archive as a whole)
  std::string reason;
};

struct ImportReport {
  uint64_t imported = 0, present = 0;  // entries published now / already in the cache
  uint64_t requests_imported = 0, requests_present = 0;
  uint64_t bytes = 0;  // of the entries' files, uncompressed
  nlohmann::json to_json() const;
};

// Imports the archive at `path`. On any verification failure nothing is published and the
// Error (kBadRequest) carries extra {"imported": 0, "present": 0, "failed": [{"key",
// "reason"}...]}, every failed entry named (an archive cut short names the entry it was
// reading and the ones it never reached).
Result<ImportReport> import_archive(DiskTier& store, const std::filesystem::path& path);

}  // namespace kforge::core::storage
