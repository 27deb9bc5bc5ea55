#include "core/store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/fsutil.hpp"
#include "core/hash.hpp"

namespace kforge::core {
namespace fs = std::filesystem;

namespace {

// Takes an exclusive flock on `lock` without waiting; the descriptor, or -1 when another
// process holds it.
int try_lock(const fs::path& lock) {
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

uint64_t tree_bytes(const fs::path& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    std::error_code fe;
    if (e.is_regular_file(fe)) n += e.file_size(fe);
  }
  return n;
}

// Every published entry directory: objects/<xx>/<key>.
template <class F>
void for_each_entry(const fs::path& objects, F&& f) {
  std::error_code ec;
  for (const auto& shard : fs::directory_iterator(objects, ec)) {
    std::error_code sc;
    for (const auto& e : fs::directory_iterator(shard.path(), sc)) {
      const std::string key = e.path().filename().string();
      if (is_hex_key(key)) f(key, e.path());
    }
  }
}

}  // namespace

nlohmann::json CacheStats::to_json() const {
  return {{"entries", entries},
          {"negative", negative},
          {"bytes", bytes},
          {"requests", requests},
          {"staging_items", staging_items}};
}

DiskStore::DiskStore(fs::path root) : root_(std::move(root)), v1_(root_ / "v1") {
  for (const char* d : {"objects", "requests", "tmp"}) fs::create_directories(v1_ / d);
  staging_ = v1_ / "tmp" / ("proc." + std::to_string(::getpid()) + "." + unique_suffix());
  fs::create_directories(staging_);
  lock_fd_ = try_lock(staging_ / ".lock");
  if (lock_fd_ < 0)
    throw fs::filesystem_error("cannot lock the staging directory", staging_,
                               std::error_code(errno, std::generic_category()));
}

DiskStore::~DiskStore() {
  std::error_code ec;
  fs::remove_all(staging_, ec);
  if (lock_fd_ >= 0) ::close(lock_fd_);
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
  for (const auto& e : fs::directory_iterator(staging_, ec)) {
    if (e.path().filename() == ".lock") continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    ++n;
  }
  for (const auto& e : fs::directory_iterator(v1_ / "tmp", ec)) {
    if (e.path() == staging_) continue;
    // A process directory whose lock we can take belongs to nobody alive.
    if (e.path().filename().string().starts_with("proc.")) {
      int fd = try_lock(e.path() / ".lock");
      if (fd < 0) continue;
      ::close(fd);
    }
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

std::optional<nlohmann::json> DiskStore::manifest(const std::string& key) {
  auto text = read_file(entry_dir(key) / "manifest.json");
  if (!text) return std::nullopt;
  nlohmann::json m = nlohmann::json::parse(*text, nullptr, false);
  bool valid = !m.is_discarded() && m.is_object() && m.value("format", 0) == kFormat &&
               m.value("key", "") == key && m.contains("files") && m["files"].is_object();
  if (valid && m.value("status", "") == "failed" &&
      m.value("expires_at", int64_t{0}) <= now_seconds()) {
    valid = false;  // a negative entry past its time-to-live
  }
  if (!valid) {
    remove_entry(key);
    return std::nullopt;
  }
  return m;
}

std::optional<nlohmann::json> DiskStore::lookup(const std::string& key) {
  auto m = manifest(key);
  if (!m) return std::nullopt;
  for (auto it = (*m)["files"].begin(); it != (*m)["files"].end(); ++it) {
    if (!verify_file(key, *m, it.key())) {
      remove_entry(key);
      return std::nullopt;
    }
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
  fs::path trash = staging_ / ("trash." + unique_suffix());
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

namespace kforge::core {

void DiskStore::touch(const std::string& key) {
  std::error_code ec;
  fs::last_write_time(entry_dir(key) / "manifest.json", fs::file_time_type::clock::now(), ec);
}

DiskStore::Pin::Pin(DiskStore& store, std::string key) : store_(store), key_(std::move(key)) {
  std::lock_guard lock(store_.pins_mu_);
  ++store_.pins_[key_];
}

DiskStore::Pin::~Pin() {
  std::lock_guard lock(store_.pins_mu_);
  if (--store_.pins_[key_] == 0) store_.pins_.erase(key_);
}

bool DiskStore::pinned(const std::string& key) const {
  std::lock_guard lock(pins_mu_);
  return pins_.contains(key);
}

CacheStats DiskStore::stats() const {
  CacheStats st;
  for_each_entry(v1_ / "objects", [&](const std::string&, const fs::path& dir) {
    ++st.entries;
    st.bytes += tree_bytes(dir);
    auto text = read_file(dir / "manifest.json");
    auto m = nlohmann::json::parse(text ? *text : "", nullptr, false);
    if (m.is_object() && m.value("status", "") == "failed") ++st.negative;
  });
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(v1_ / "requests", ec)) {
    std::error_code fe;
    if (e.is_regular_file(fe)) ++st.requests;
  }
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(v1_ / "tmp", ec)) ++st.staging_items;
  return st;
}

EvictResult DiskStore::evict(uint64_t target_bytes, uint64_t only_above) {
  struct Entry {
    fs::file_time_type used;
    std::string key;
    uint64_t bytes;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  for_each_entry(v1_ / "objects", [&](const std::string& key, const fs::path& dir) {
    std::error_code ec;
    auto used = fs::last_write_time(dir / "manifest.json", ec);
    const uint64_t bytes = tree_bytes(dir);
    total += bytes;
    entries.push_back({ec ? fs::file_time_type::min() : used, key, bytes});
  });
  EvictResult r;
  if (total <= only_above) {
    r.bytes_after = total;
    return r;
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const auto& e : entries) {
    if (total <= target_bytes) break;
    if (pinned(e.key)) {
      ++r.kept_pinned;
      continue;
    }
    remove_entry(e.key);
    total -= e.bytes;
    r.freed_bytes += e.bytes;
    ++r.evicted;
  }
  r.bytes_after = total;
  return r;
}

VerifyResult DiskStore::verify_all() {
  std::vector<std::string> keys;
  for_each_entry(v1_ / "objects",
                 [&](const std::string& key, const fs::path&) { keys.push_back(key); });
  VerifyResult r;
  for (const auto& key : keys) {
    ++r.checked;
    if (!lookup(key)) r.removed.push_back(key);  // lookup re-hashes and removes what fails
  }
  return r;
}

GcResult DiskStore::collect_garbage() {
  GcResult r;
  std::vector<std::string> expired;
  for_each_entry(v1_ / "objects", [&](const std::string& key, const fs::path& dir) {
    auto text = read_file(dir / "manifest.json");
    auto m = nlohmann::json::parse(text ? *text : "", nullptr, false);
    if (m.is_object() && m.value("status", "") == "failed" &&
        m.value("expires_at", int64_t{0}) <= now_seconds()) {
      expired.push_back(key);
    }
  });
  for (const auto& key : expired) remove_entry(key);
  r.expired = expired.size();
  r.dangling_requests = drop_dangling_requests();
  r.staging_items = clear_staging();
  return r;
}

uint64_t DiskStore::drop_dangling_requests() {
  uint64_t n = 0;
  std::vector<fs::path> dangling;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(v1_ / "requests", ec)) {
    std::error_code fe;
    if (!e.is_regular_file(fe)) continue;
    auto key = lookup_request(e.path().filename().string());
    if (!key || !fs::exists(entry_dir(*key) / "manifest.json")) dangling.push_back(e.path());
  }
  for (const auto& p : dangling) {
    std::error_code rm;
    if (fs::remove(p, rm)) ++n;
  }
  return n;
}

}  // namespace kforge::core
