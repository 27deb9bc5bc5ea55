#include "core/store.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/fsutil.hpp"
#include "core/hash.hpp"

namespace kforge::core {
namespace fs = std::filesystem;

DiskStore::DiskStore(fs::path root) : root_(std::move(root)), v1_(root_ / "v1") {
  for (const char* d : {"objects", "requests", "tmp"}) fs::create_directories(v1_ / d);
}

int64_t DiskStore::now_seconds() const {
  return std::chrono::duration_cast<std::chrono::seconds>(now_().time_since_epoch()).count();
}

fs::path DiskStore::entry_dir(const std::string& key) const {
  return v1_ / "objects" / key.substr(0, 2) / key;
}

size_t DiskStore::clear_staging() {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(staging_root(), ec)) {
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    ++n;
  }
  return n;
}

Result<fs::path> DiskStore::make_staging() {
  fs::path dir = staging_root() / ("build." + unique_suffix());
  std::error_code ec;
  if (!fs::create_directories(dir, ec) || ec) {
    return fail(ErrorKind::kInternal,
                "cannot create staging directory " + dir.string() + ": " + ec.message());
  }
  return dir;
}

Result<nlohmann::json> DiskStore::publish(const fs::path& staging, const std::string& key,
                                          nlohmann::json manifest) {
  nlohmann::json files = nlohmann::json::object();
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(staging, ec)) {
    if (!e.is_regular_file()) continue;
    std::string rel = fs::relative(e.path(), staging).string();
    if (rel == "manifest.json") continue;
    auto digest = sha256_file(e.path());
    if (!digest) return std::unexpected(digest.error());
    files[rel] = {{"sha256", *digest}, {"bytes", e.file_size()}};
    if (auto r = fsync_path(e.path()); !r) return std::unexpected(r.error());
  }
  manifest["format"] = kFormat;
  manifest["key"] = key;
  manifest["files"] = files;
  if (!manifest.contains("created_at")) manifest["created_at"] = now_seconds();
  if (auto r = write_file(staging / "manifest.json", manifest.dump(2)); !r)
    return std::unexpected(r.error());
  if (auto r = fsync_path(staging); !r) return std::unexpected(r.error());

  fs::path dest = entry_dir(key);
  fs::create_directories(dest.parent_path(), ec);
  if (::rename(staging.c_str(), dest.c_str()) != 0) {
    int err = errno;
    fs::remove_all(staging, ec);
    if (err == ENOTEMPTY || err == EEXIST) {
      if (auto existing = lookup(key)) return *existing;  // another writer won the race
    }
    return fail(ErrorKind::kInternal, "cannot publish " + key + ": " + std::strerror(err));
  }
  if (auto r = fsync_path(dest.parent_path()); !r) return std::unexpected(r.error());
  return manifest;
}

std::optional<nlohmann::json> DiskStore::lookup(const std::string& key) {
  fs::path dir = entry_dir(key);
  auto text = read_file(dir / "manifest.json");
  if (!text) return std::nullopt;
  nlohmann::json m = nlohmann::json::parse(*text, nullptr, false);
  bool valid = !m.is_discarded() && m.is_object() && m.value("format", 0) == kFormat &&
               m.value("key", "") == key && m.contains("files") && m["files"].is_object();
  if (valid && m.value("status", "") == "failed" &&
      m.value("expires_at", int64_t{0}) <= now_seconds()) {
    valid = false;  // a negative entry past its time-to-live
  }
  if (valid) {
    for (auto it = m["files"].begin(); it != m["files"].end() && valid; ++it) {
      valid = verify_file(key, m, it.key());
    }
  }
  if (!valid) {
    remove_entry(key);
    return std::nullopt;
  }
  return m;
}

bool DiskStore::verify_file(const std::string& key, const nlohmann::json& manifest,
                            const std::string& name) {
  if (!manifest.contains("files") || !manifest["files"].contains(name)) return false;
  const auto& f = manifest["files"][name];
  fs::path p = entry_dir(key) / name;
  std::error_code ec;
  auto size = fs::file_size(p, ec);
  if (ec || size != f.value("bytes", uint64_t{0})) return false;
  auto digest = sha256_file(p);
  return digest && *digest == f.value("sha256", "");
}

void DiskStore::remove_entry(const std::string& key) {
  fs::path dir = entry_dir(key);
  fs::path trash = staging_root() / ("trash." + unique_suffix());
  std::error_code ec;
  if (::rename(dir.c_str(), trash.c_str()) == 0) fs::remove_all(trash, ec);
}

std::optional<std::string> DiskStore::lookup_request(const std::string& rkey) {
  auto text = read_file(v1_ / "requests" / rkey.substr(0, 2) / rkey);
  if (!text) return std::nullopt;
  std::string key = text->substr(0, text->find('\n'));
  if (!is_hex_key(key)) return std::nullopt;
  return key;
}

Result<void> DiskStore::put_request(const std::string& rkey, const std::string& key) {
  fs::path dir = v1_ / "requests" / rkey.substr(0, 2);
  std::error_code ec;
  fs::create_directories(dir, ec);
  return write_file_atomic(dir / rkey, key + "\n");
}

}  // namespace kforge::core
