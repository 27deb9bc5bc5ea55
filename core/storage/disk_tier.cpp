#include "core/storage/disk_tier.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"

namespace kforge::core::storage {
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

DiskTier::DiskTier(fs::path root) : root_(std::move(root)), v1_(root_ / "v1") {
  for (const char* d : {"objects", "requests", "families", "autotune", "tmp"}) fs::create_directories(v1_ / d);
  staging_ = v1_ / "tmp" / ("proc." + std::to_string(::getpid()) + "." + unique_suffix());
  fs::create_directories(staging_);
  lock_fd_ = try_lock(staging_ / ".lock");
  if (lock_fd_ < 0)
    throw fs::filesystem_error("cannot lock the staging directory", staging_,
                               std::error_code(errno, std::generic_category()));
}

DiskTier::~DiskTier() {
  std::error_code ec;
  fs::remove_all(staging_, ec);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

int64_t DiskTier::wall_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
             .count() +
         clock_offset_ns_.load(std::memory_order_relaxed);
}

int64_t DiskTier::steady_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
             .count() +
         clock_offset_ns_.load(std::memory_order_relaxed);
}

int64_t DiskTier::now_seconds() const { return wall_ns() / 1'000'000'000; }

fs::path DiskTier::entry_dir(const std::string& key) const {
  return v1_ / "objects" / key.substr(0, 2) / key;
}

std::string DiskTier::relative_path(const std::string& key, const std::string& name) const {
  return "v1/objects/" + key.substr(0, 2) + "/" + key + "/" + name;
}

size_t DiskTier::clear_staging() {
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

Result<fs::path> DiskTier::make_staging() {
  fs::path dir = staging_root() / ("build." + unique_suffix());
  std::error_code ec;
  if (!fs::create_directories(dir, ec) || ec) {
    return fail(ErrorKind::kInternal,
                "cannot create staging directory " + dir.string() + ": " + ec.message());
  }
  return dir;
}

Result<nlohmann::json> DiskTier::publish(const fs::path& staging, const std::string& key,
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
  index_family(manifest);
  return manifest;
}

namespace {

bool is_hex(const std::string& s, size_t size) {
  return s.size() == size && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Removes every regular file under `dir` that `doomed` picks; returns how many went.
uint64_t remove_files_if(const fs::path& dir, const std::function<bool(const fs::path&)>& doomed) {
  std::vector<fs::path> picked;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    std::error_code fe;
    if (e.is_regular_file(fe) && doomed(e.path())) picked.push_back(e.path());
  }
  uint64_t n = 0;
  for (const auto& p : picked) {
    std::error_code rm;
    n += fs::remove(p, rm);
  }
  return n;
}

}  // namespace

void DiskTier::index_family(const nlohmann::json& manifest) {
  // An exported kernel is its base kernel renamed: the base stands for both.
  if (!manifest.contains("family") || !manifest["family"].is_string() || manifest.contains("export")) return;
  const std::string family = manifest["family"];
  if (!is_hex(family, 32)) return;
  const fs::path dir = v1_ / "families" / family.substr(0, 2) / family;
  std::error_code ec;
  fs::create_directories(dir, ec);
  // Advisory: a link lost in a crash only makes an explanation less precise.
  const int fd = ::open((dir / manifest["key"].get<std::string>()).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
}

std::optional<int64_t> DiskTier::published_ns(const std::string& key) const {
  struct stat st {};
  if (::stat((entry_dir(key) / "manifest.json").c_str(), &st) != 0) return std::nullopt;
  return int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

std::vector<DiskTier::FamilyMember> DiskTier::family_members(const std::string& family, size_t limit) const {
  if (!is_hex(family, 32)) return {};
  std::vector<FamilyMember> members;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(v1_ / "families" / family.substr(0, 2) / family, ec)) {
    std::string key = e.path().filename().string();
    if (!is_hex(key, 64)) continue;
    if (auto at = published_ns(key)) members.push_back({std::move(key), *at});  // else gone
  }
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.published_ns > b.published_ns; });
  if (members.size() > limit) members.resize(limit);
  return members;
}

uint64_t DiskTier::drop_dangling_family_links() {
  return remove_files_if(v1_ / "families", [this](const fs::path& link) {
    const std::string key = link.filename().string();
    return !is_hex(key, 64) || !fs::exists(entry_dir(key) / "manifest.json");
  });
}

namespace {

template <class Id>
std::optional<Id> identity_of(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return std::nullopt;
  return Id{st.st_dev, st.st_ino, uint64_t(st.st_size),
            int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
            int64_t(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec};
}

}  // namespace

std::optional<DiskTier::FileId> DiskTier::identify(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return identity_of<FileId>(st);
}

std::optional<DiskTier::FileId> DiskTier::identify(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::nullopt;
  return identity_of<FileId>(st);
}

bool DiskTier::racy(const FileId& id) const {
  // The file's times come from the kernel's clock; the seam moves the store's now, so a
  // test's fresh file can look old without waiting.
  return wall_ns() - std::max(id.mtime_ns, id.ctime_ns) < 1'000'000'000;
}

std::optional<nlohmann::json> DiskTier::read_manifest(const std::string& key) {
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
    discard(key);
    return std::nullopt;
  }
  return m;
}

std::shared_ptr<DiskTier::Verified> DiskTier::memoised(const std::string& key) const {
  auto v = verified_.get(key);
  if (!v) return nullptr;
  const int64_t now = steady_ns();
  if (now - (*v)->checked_ns.load(std::memory_order_relaxed) < 100'000'000) return *v;
  const fs::path dir = entry_dir(key);
  if (identify(dir / "manifest.json") != (*v)->manifest_id) return nullptr;
  for (const auto& [name, id] : (*v)->files) {
    if (identify(dir / name) != id) return nullptr;
  }
  (*v)->checked_ns.store(now, std::memory_order_relaxed);
  return *v;
}

std::shared_ptr<DiskTier::Verified> DiskTier::verify_entry(const std::string& key) {
  const fs::path dir = entry_dir(key);
  // Identities are taken before the reads: a write during the hash changes them, and the
  // next lookup verifies again.
  auto manifest_id = identify(dir / "manifest.json");
  auto m = read_manifest(key);
  if (!manifest_id || !m) return nullptr;
  auto v = std::make_shared<Verified>();
  v->manifest_id = *manifest_id;
  bool memo = !racy(*manifest_id);
  for (const auto& [name, f] : (*m)["files"].items()) {
    const auto id = identify(dir / name);
    auto digest = id && id->size == f.value("bytes", uint64_t{0}) ? sha256_file(dir / name)
                                                                   : Result<std::string>(std::string());
    if (!id || !digest || *digest != f.value("sha256", "")) {
      discard(key);
      return nullptr;
    }
    memo = memo && !racy(*id);
    v->files.emplace_back(name, *id);
  }
  v->manifest = std::make_shared<const nlohmann::json>(std::move(*m));
  v->checked_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count();
  if (memo) verified_.put(key, v);
  return v;
}

std::shared_ptr<const nlohmann::json> DiskTier::lookup(const std::string& key) {
  auto v = memoised(key);
  if (v && v->manifest->value("status", "") == "failed" &&
      v->manifest->value("expires_at", int64_t{0}) <= now_seconds()) {
    discard(key);  // a negative entry that has expired since it was verified
    return nullptr;
  }
  if (!v) v = verify_entry(key);
  return v ? v->manifest : nullptr;
}

std::shared_ptr<const nlohmann::json> DiskTier::memo_manifest(const std::string& key) const {
  auto v = verified_.get(key);
  return v ? (*v)->manifest : nullptr;
}

std::shared_ptr<const std::string> DiskTier::read_hot(const std::string& key, const std::string& name) {
  const std::string hot_key = key + "/" + name;
  auto hot = hot_files_.get(hot_key);
  if (!hot) return nullptr;
  if (identify(entry_dir(key) / name) == (*hot)->id) return {*hot, &(*hot)->data};
  hot_files_.erase(hot_key);
  return nullptr;
}

std::optional<std::string> DiskTier::read_verified(const std::string& key, const std::string& name) {
  const std::string hot_key = key + "/" + name;
  if (auto hot = read_hot(key, name)) return *hot;
  // Only this file's identity is checked against the memo: it is all that is read.
  auto v = verified_.get(key).value_or(nullptr);
  bool fresh = false;
  while (true) {
    if (!v) {
      v = verify_entry(key);
      fresh = true;
    }
    if (!v) return std::nullopt;
    const auto it = std::find_if(v->files.begin(), v->files.end(), [&](const auto& f) { return f.first == name; });
    if (it == v->files.end()) return std::nullopt;
    const int fd = ::open((entry_dir(key) / name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {  // removed meanwhile (evicted, or by another process)
      verified_.erase(key);
      return std::nullopt;
    }
    std::string data;
    const auto id = identify(fd);
    if (id) {
      data.resize(id->size);
      size_t got = 0;
      while (got < data.size()) {
        const ssize_t n = ::read(fd, data.data() + got, data.size() - got);
        if (n <= 0) break;
        got += size_t(n);
      }
      data.resize(got);
    }
    ::close(fd);
    if (!id) return std::nullopt;
    // The descriptor is the verified file, unchanged: its bytes are the verified bytes.
    if (*id == it->second && !racy(*id) && data.size() == id->size) {
      if (data.size() <= kHotFileMax) hot_files_.put(hot_key, std::make_shared<const HotFile>(HotFile{*id, data}));
      return data;
    }
    if (!fresh) {  // changed since the memo (or another entry under the key): verify again
      verified_.erase(key);
      v = nullptr;
      continue;
    }
    // Verified just now but changed since, or too recently written to trust its identity:
    // the bytes read are checked themselves.
    const auto& f = (*v->manifest)["files"][name];
    if (data.size() == f.value("bytes", uint64_t{0}) && sha256_hex(data) == f.value("sha256", "")) return data;
    discard(key);
    return std::nullopt;
  }
}

void DiskTier::discard(const std::string& key) {
  discarded_.put(key, true);
  remove_entry(key);
}

bool DiskTier::discarded(const std::string& key) const {
  return discarded_.get(key).has_value();
}

void DiskTier::remove_entry(const std::string& key) {
  verified_.erase(key);  // (hot files are checked by identity: a removed file fails it)
  fs::path dir = entry_dir(key);
  fs::path trash = staging_ / ("trash." + unique_suffix());
  std::error_code ec;
  if (::rename(dir.c_str(), trash.c_str()) == 0) fs::remove_all(trash, ec);
}

std::optional<std::string> DiskTier::lookup_request(const std::string& rkey) {
  if (auto key = requests_memo_.get(rkey)) return key;
  auto text = read_file(v1_ / "requests" / rkey.substr(0, 2) / rkey);
  if (!text) return std::nullopt;
  std::string key = text->substr(0, text->find('\n'));
  if (!is_hex_key(key)) return std::nullopt;
  requests_memo_.put(rkey, key);
  return key;
}

bool DiskTier::put_request(const std::string& rkey, const std::string& key) {
  if (!is_hex_key(rkey) || !is_hex_key(key)) return false;
  fs::path dir = v1_ / "requests" / rkey.substr(0, 2);
  std::error_code ec;
  fs::create_directories(dir, ec);
  const bool written = write_file_atomic(dir / rkey, key + "\n").has_value();
  if (written) requests_memo_.put(rkey, key);
  return written;
}

std::optional<nlohmann::json> DiskTier::get_autotune(const std::string& akey) {
  if (!is_hex_key(akey)) return std::nullopt;
  auto text = read_file(v1_ / "autotune" / akey.substr(0, 2) / (akey + ".json"));
  if (!text) return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

bool DiskTier::put_autotune(const std::string& akey, const nlohmann::json& ranking) {
  if (!is_hex_key(akey)) return false;
  const fs::path dir = v1_ / "autotune" / akey.substr(0, 2);
  std::error_code ec;
  fs::create_directories(dir, ec);
  return write_file_atomic(dir / (akey + ".json"), ranking.dump(2)).has_value();
}

std::optional<Entry> DiskTier::get(const std::string& key, bool) {
  auto m = lookup(key);
  if (!m) return std::nullopt;
  Entry e{*m, {}};
  for (const auto& [name, f] : (*m)["files"].items()) {
    auto bytes = read_verified(key, name);
    if (!bytes) return std::nullopt;
    e.files.emplace(name, std::move(*bytes));
  }
  return e;
}

bool DiskTier::put(const Entry& entry) {
  const std::string& key = entry.key();
  if (!is_hex_key(key) || !entry.manifest.contains("files") || !entry.manifest["files"].is_object()) return false;
  auto staging = make_staging();
  if (!staging) return false;
  RemoveOnExit cleanup{*staging};  // unless published (renamed away)
  for (const auto& [name, f] : entry.manifest["files"].items()) {
    const auto bytes = entry.files.find(name);
    const fs::path dest = (*staging / name).lexically_normal();
    // A name from another tier never leaves the staging directory.
    if (bytes == entry.files.end() || name == "manifest.json" ||
        !dest.string().starts_with(staging->string() + "/"))
      return false;
    if (sha256_hex(bytes->second) != f.value("sha256", "") || bytes->second.size() != f.value("bytes", uint64_t{0}))
      return false;
    std::error_code ec;
    fs::create_directories(dest.parent_path(), ec);
    if (!write_file(dest, bytes->second)) return false;
  }
  return publish(*staging, key, entry.manifest).has_value();
}

namespace {

// A benchmark result's name: the device digest, then the tensors' (hex and '-').
bool result_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && name.find_first_not_of("0123456789abcdef-") == std::string::npos;
}

std::optional<nlohmann::json> read_json_file(const fs::path& path) {
  auto text = read_file(path);
  if (!text) return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

}  // namespace

std::optional<nlohmann::json> DiskTier::bench_result(const std::string& key, const std::string& result) const {
  if (!is_hex_key(key) || !result_name(result)) return std::nullopt;
  return read_json_file(entry_dir(key) / "bench" / (result + ".json"));
}

bool DiskTier::put_bench_result(const std::string& key, const std::string& result, const nlohmann::json& value) {
  if (!is_hex_key(key) || !result_name(result) || !fs::exists(entry_dir(key) / "manifest.json")) return false;
  std::error_code ec;
  fs::create_directories(entry_dir(key) / "bench", ec);
  return write_file_atomic(entry_dir(key) / "bench" / (result + ".json"), value.dump(2)).has_value();
}

nlohmann::json DiskTier::bench_results(const std::string& key) const {
  nlohmann::json out = nlohmann::json::object();
  if (!is_hex_key(key)) return out;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(entry_dir(key) / "bench", ec)) {
    if (f.path().extension() != ".json" || !result_name(f.path().stem().string())) continue;
    if (auto j = read_json_file(f.path())) out[f.path().stem().string()] = std::move(*j);
  }
  return out;
}

std::optional<nlohmann::json> DiskTier::ranking(const std::string& key) const {
  if (!is_hex_key(key)) return std::nullopt;
  return read_json_file(entry_dir(key) / "autotune.json");
}

bool DiskTier::put_ranking(const std::string& key, const nlohmann::json& ranking) {
  if (!is_hex_key(key) || !fs::exists(entry_dir(key) / "manifest.json")) return false;
  return write_file_atomic(entry_dir(key) / "autotune.json", ranking.dump(2)).has_value();
}

}  // namespace kforge::core::storage

namespace kforge::core::storage {

void DiskTier::touch(const std::string& key) {
  // Recency is the directory's mtime (the manifest's own identity stays put, and its memo
  // with it); written at most once a minute per entry, which is all an LRU needs.
  const int64_t now = now_seconds();
  if (auto v = verified_.get(key)) {
    int64_t last = (*v)->touched_at.load(std::memory_order_relaxed);
    if (now - last < 60 || !(*v)->touched_at.compare_exchange_strong(last, now)) return;
  }
  ::utimensat(AT_FDCWD, entry_dir(key).c_str(), nullptr, 0);
}

DiskTier::Pin::Pin(DiskTier& store, std::string key) : store_(store), key_(std::move(key)) {
  auto& shard = store_.pin_shard(key_);
  std::lock_guard lock(shard.mu);
  ++shard.pins[key_];
}

DiskTier::Pin::~Pin() {
  auto& shard = store_.pin_shard(key_);
  std::lock_guard lock(shard.mu);
  if (--shard.pins[key_] == 0) shard.pins.erase(key_);
}

bool DiskTier::pinned(const std::string& key) const {
  auto& shard = pin_shard(key);
  std::lock_guard lock(shard.mu);
  return shard.pins.contains(key);
}

CacheStats DiskTier::stats() const {
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

EvictResult DiskTier::evict(uint64_t target_bytes, uint64_t only_above) {
  struct Entry {
    fs::file_time_type used;
    std::string key;
    uint64_t bytes;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  for_each_entry(v1_ / "objects", [&](const std::string& key, const fs::path& dir) {
    std::error_code ec;
    auto used = fs::last_write_time(dir, ec);  // touch() keeps it
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

VerifyResult DiskTier::verify_all() {
  std::vector<std::string> keys;
  for_each_entry(v1_ / "objects",
                 [&](const std::string& key, const fs::path&) { keys.push_back(key); });
  VerifyResult r;
  for (const auto& key : keys) {
    ++r.checked;
    verified_.erase(key);  // hashed again whatever the memo says
    if (!lookup(key)) r.removed.push_back(key);  // lookup hashes and removes what fails
  }
  return r;
}

GcResult DiskTier::collect_garbage() {
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
  r.dangling_family_links = drop_dangling_family_links();
  r.staging_items = clear_staging();
  return r;
}

std::vector<std::string> DiskTier::keys() const {
  std::vector<std::string> keys;
  for_each_entry(v1_ / "objects", [&](const std::string& key, const fs::path&) { keys.push_back(key); });
  return keys;
}

nlohmann::json DiskTier::Summary::to_json() const {
  return {{"key", key},
          {"kernel_name", kernel_name},
          {"backend", backend},
          {"archs", archs},
          {"template", template_name.empty() ? nlohmann::json(nullptr) : nlohmann::json(template_name)},
          {"status", status},
          {"created_at", created_at},
          {"bytes", bytes}};
}

std::string DiskTier::cursor_of(const Summary& s) { return std::to_string(s.created_at) + "." + s.key; }

DiskTier::ListPage DiskTier::list(const ListQuery& q) const {
  auto lower = [](std::string v) {
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v;
  };
  const std::string name = lower(q.name);
  const int64_t now = now_seconds();
  std::vector<std::shared_ptr<const Listed>> hits;
  for_each_entry(v1_ / "objects", [&](const std::string& key, const fs::path& dir) {
    if (!key.starts_with(q.key_prefix)) return;
    const auto id = identify(dir / "manifest.json");
    if (!id) return;  // removed meanwhile
    auto listed = listed_.get(key);
    if (!listed || (*listed)->manifest_id != *id) {
      auto text = read_file(dir / "manifest.json");
      if (!text) return;
      const nlohmann::json m = nlohmann::json::parse(*text, nullptr, false);
      if (m.is_discarded() || !m.is_object() || m.value("key", "") != key) return;
      auto made = std::make_shared<Listed>();
      made->manifest_id = *id;
      Summary& e = made->summary;
      e.key = key;
      auto str = [&](const char* field) {
        const auto it = m.find(field);
        return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
      };
      e.kernel_name = str("kernel_name");
      e.backend = str("backend");
      e.status = str("status");
      if (const auto a = m.find("archs"); a != m.end() && a->is_array())
        for (const auto& arch : *a)
          if (arch.is_string()) e.archs.push_back(arch.get<std::string>());
      if (const auto t = m.find("template"); t != m.end() && t->is_object())
        if (const auto n = t->find("template"); n != t->end() && n->is_string()) e.template_name = n->get<std::string>();
      if (const auto c = m.find("created_at"); c != m.end() && c->is_number_integer()) e.created_at = c->get<int64_t>();
      if (const auto f = m.find("files"); f != m.end() && f->is_object())
        for (const auto& [file, info] : f->items())
          if (info.is_object() && info.contains("bytes") && info["bytes"].is_number_unsigned())
            e.bytes += info["bytes"].get<uint64_t>();
      if (const auto x = m.find("expires_at"); x != m.end() && x->is_number_integer()) made->expires_at = x->get<int64_t>();
      listed_.put(key, made);
      listed = made;
    }
    const Listed& l = **listed;
    const Summary& e = l.summary;
    if (e.status == "failed" && l.expires_at <= now) return;  // expired: a miss, gc removes it
    if (!q.backend.empty() && e.backend != q.backend) return;
    if (!q.status.empty() && e.status != q.status) return;
    if (q.template_name && e.template_name != *q.template_name) return;
    if (!name.empty() && lower(e.kernel_name).find(name) == std::string::npos) return;
    hits.push_back(*listed);
  });
  std::sort(hits.begin(), hits.end(), [](const auto& a, const auto& b) {
    return a->summary.created_at != b->summary.created_at ? a->summary.created_at > b->summary.created_at
                                                          : a->summary.key < b->summary.key;
  });
  ListPage page;
  page.total = hits.size();
  size_t first = 0;
  if (!q.after.empty()) {  // the first entry that sorts after the cursor's
    const size_t dot = q.after.find('.');
    const int64_t at = dot == std::string::npos ? 0 : std::strtoll(q.after.c_str(), nullptr, 10);
    const std::string key = dot == std::string::npos ? q.after : q.after.substr(dot + 1);
    first = size_t(std::partition_point(hits.begin(), hits.end(), [&](const auto& h) {
                     return h->summary.created_at != at ? h->summary.created_at > at : h->summary.key <= key;
                   }) - hits.begin());
  }
  for (size_t i = first; i < hits.size() && page.entries.size() < q.limit; ++i) page.entries.push_back(hits[i]->summary);
  if (first + page.entries.size() < hits.size() && !page.entries.empty()) page.next = cursor_of(page.entries.back());
  return page;
}

std::vector<std::pair<std::string, std::string>> DiskTier::request_pointers() {
  std::vector<std::pair<std::string, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(v1_ / "requests", ec)) {
    std::error_code fe;
    const std::string rkey = e.path().filename().string();
    if (!e.is_regular_file(fe) || !is_hex_key(rkey)) continue;
    if (auto key = lookup_request(rkey)) out.emplace_back(rkey, *key);
  }
  return out;
}

uint64_t DiskTier::drop_dangling_requests() {
  return remove_files_if(v1_ / "requests", [this](const fs::path& pointer) {
    auto key = lookup_request(pointer.filename().string());
    return !key || !fs::exists(entry_dir(*key) / "manifest.json");
  });
}

}  // namespace kforge::core::storage
