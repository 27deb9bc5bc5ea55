#include "core/storage/archive.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>
#include <set>

#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"

namespace kforge::core::storage {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kIndexName = "kforge-export.json";
constexpr const char* kFormatName = "kforge-cache-export";
constexpr int kVersion = 1;
constexpr uint64_t kMaxIndexBytes = 64 << 20;
constexpr size_t kBlock = 64 << 10;

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n) { EVP_DigestUpdate(ctx_, data, n); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx_, md, &len);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) {
      out += digits[md[i] >> 4];
      out += digits[md[i] & 15];
    }
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

// PART := [A-Za-z0-9_+-][A-Za-z0-9._+-]{0,127}
bool valid_part(std::string_view p) {
  if (p.empty() || p.size() > 128 || p[0] == '.') return false;
  return std::all_of(p.begin(), p.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '+' || c == '-';
  });
}

// NAME := PART ("/" PART)?
bool valid_name(std::string_view n) {
  const auto slash = n.find('/');
  if (slash == std::string_view::npos) return valid_part(n);
  return valid_part(n.substr(0, slash)) && valid_part(n.substr(slash + 1));
}

std::string member_prefix(const std::string& key) {
  return "v1/objects/" + key.substr(0, 2) + "/" + key + "/";
}

bool valid_record(const json& f) {
  return f.is_object() && f.contains("sha256") && f["sha256"].is_string() &&
         is_hex_key(f["sha256"].get<std::string>()) && f.contains("bytes") && f["bytes"].is_number_unsigned();
}

std::string archive_message(struct archive* a) {
  const char* s = archive_error_string(a);
  return s ? s : "unknown libarchive error";
}

struct ArchiveWriteDeleter {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct ArchiveReadDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct EntryDeleter {
  void operator()(struct archive_entry* e) const { archive_entry_free(e); }
};

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= size_t(w);
  }
  return true;
}

}  // namespace

// --- filters ----------------------------------------------------------------------------

Result<int64_t> parse_since(std::string_view text, const std::string& field) {
  const std::string s(text);
  if (!s.empty() && s.size() <= 12 && s.find_first_not_of("0123456789") == std::string::npos) return std::stoll(s);
  // YYYY-MM-DD[(T| )HH:MM[:SS]][Z]
  const std::string t = s.ends_with('Z') ? s.substr(0, s.size() - 1) : s;
  auto digits = [&](size_t at, size_t n) {
    int v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (i >= t.size() || !std::isdigit(static_cast<unsigned char>(t[i]))) return -1;
      v = v * 10 + (t[i] - '0');
    }
    return v;
  };
  std::tm tm{};
  bool ok = (t.size() == 10 || t.size() == 16 || t.size() == 19) && t[4] == '-' && t[7] == '-';
  if (ok) {
    tm.tm_year = digits(0, 4) - 1900;
    tm.tm_mon = digits(5, 2) - 1;
    tm.tm_mday = digits(8, 2);
    ok = tm.tm_year >= 70 && tm.tm_mon >= 0 && tm.tm_mon < 12 && tm.tm_mday >= 1 && tm.tm_mday <= 31;
  }
  if (ok && t.size() >= 16) {
    tm.tm_hour = digits(11, 2);
    tm.tm_min = digits(14, 2);
    ok = (t[10] == 'T' || t[10] == ' ') && t[13] == ':' && tm.tm_hour >= 0 && tm.tm_hour < 24 && tm.tm_min >= 0 &&
         tm.tm_min < 60;
  }
  if (ok && t.size() == 19) {
    tm.tm_sec = digits(17, 2);
    ok = t[16] == ':' && tm.tm_sec >= 0 && tm.tm_sec < 61;
  }
  if (!ok) {
    return fail_field(field, "since is unix seconds or an ISO-8601 UTC date or time (2024-06-10, "
                             "2024-06-10T12:00:00Z), got `" + s.substr(0, 64) + "`");
  }
  return int64_t(::timegm(&tm));
}

bool ExportMatch::matches(const json& m) const {
  // A field the entry lacks (a source-mode kernel's template) is "": only an empty glob
  // matches it, so `template=*` selects the template kernels and `template=` the others.
  auto glob = [&](const std::string& value) {
    return value.empty() ? this->glob.empty() : ::fnmatch(this->glob.c_str(), value.c_str(), 0) == 0;
  };
  if (field == "arch") {
    for (const auto& a : m.value("archs", json::array()))
      if (a.is_string() && glob(a.get<std::string>())) return true;
    return false;
  }
  if (field == "template") {  // the manifest's template is TemplateSpec::to_json(): its name is "template"
    const auto& t = m.contains("template") ? m["template"] : json();
    const auto name = t.is_object() ? t.find("template") : t.end();
    return glob(t.is_object() && name != t.end() && name->is_string() ? name->get<std::string>() : "");
  }
  const auto it = m.find(field);
  return glob(it != m.end() && it->is_string() ? it->get<std::string>() : "");
}

Result<ExportMatch> parse_match(std::string_view text, const std::string& field) {
  const auto eq = text.find('=');
  const std::string name(text.substr(0, eq == std::string_view::npos ? 0 : eq));
  static const std::set<std::string> fields = {"key", "backend", "kernel_name", "arch", "template"};
  if (eq == std::string_view::npos || !fields.contains(name) || text.size() > 512) {
    return fail_field(field, "match is FIELD=GLOB with FIELD one of key, backend, kernel_name, arch, template; got `" +
                                 std::string(text.substr(0, 64)) + "`");
  }
  return ExportMatch{name, std::string(text.substr(eq + 1))};
}

// --- export -----------------------------------------------------------------------------

Result<std::unique_ptr<ExportSnapshot>> ExportSnapshot::take(DiskTier& store, const ExportOptions& opts) {
  auto staging = store.make_staging();
  if (!staging) return std::unexpected(staging.error());
  std::unique_ptr<ExportSnapshot> snap(new ExportSnapshot());
  snap->dir_ = *staging;
  json entries = json::array();
  std::set<std::string> exported;
  auto keys = store.keys();
  std::sort(keys.begin(), keys.end());
  for (const auto& key : keys) {
    const auto m = store.lookup(key);  // verified (hashed unless memoised); a corrupt entry is dropped
    if (!m || m->value("status", "") != "ok") continue;
    if (opts.since && m->value("created_at", int64_t{0}) < *opts.since) continue;
    if (!std::all_of(opts.matches.begin(), opts.matches.end(), [&](const auto& f) { return f.matches(*m); }))
      continue;
    // Hard links: an eviction or removal from now on takes nothing from the snapshot.
    const fs::path src = store.entry_dir(key), dst = snap->dir_ / key;
    std::vector<std::string> names = {"manifest.json"};
    for (const auto& [name, f] : (*m)["files"].items()) names.push_back(name);
    bool linked = true;
    for (const auto& name : names) {
      std::error_code ec;
      fs::create_directories((dst / name).parent_path(), ec);
      fs::create_hard_link(src / name, dst / name, ec);
      if (ec && ec != std::errc::no_such_file_or_directory) {  // a file system without links
        ec.clear();
        fs::copy_file(src / name, dst / name, ec);
      }
      if (ec) {
        linked = false;  // removed meanwhile: not exported
        break;
      }
    }
    // The manifest as linked must be the one verified (not a new entry under the key).
    auto text = linked ? read_file(dst / "manifest.json") : Result<std::string>(std::string());
    json linked_manifest = text ? json::parse(*text, nullptr, false) : json();
    if (!linked || !text || !linked_manifest.is_object() || linked_manifest.value("files", json()) != (*m)["files"]) {
      std::error_code ec;
      fs::remove_all(dst, ec);
      continue;
    }
    json files = {{"manifest.json", {{"sha256", sha256_hex(*text)}, {"bytes", text->size()}}}};
    for (const auto& [name, f] : (*m)["files"].items()) files[name] = {{"sha256", f["sha256"]}, {"bytes", f["bytes"]}};
    for (const auto& [name, f] : files.items()) snap->bytes_ += f["bytes"].get<uint64_t>();
    entries.push_back({{"key", key}, {"created_at", m->value("created_at", int64_t{0})}, {"files", files}});
    exported.insert(key);
  }
  json requests = json::object();
  for (const auto& [rkey, key] : store.request_pointers()) {
    if (exported.contains(key)) requests[rkey] = key;
  }
  json match = json::array();
  for (const auto& f : opts.matches) match.push_back(f.field + "=" + f.glob);
  snap->index_ = {{"format", kFormatName},
                  {"version", kVersion},
                  {"created_at", store.now_seconds()},
                  {"kforge_version", opts.kforge_version},
                  {"filters", {{"since", opts.since ? json(*opts.since) : json(nullptr)}, {"match", match}}},
                  {"entries", entries},
                  {"requests", requests}};
  return snap;
}

ExportSnapshot::~ExportSnapshot() {
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

Result<uint64_t> ExportSnapshot::write(const Writer& writer) const {
  struct Ctx {
    const Writer* writer;
    bool gave_up = false;
    uint64_t bytes = 0;
  } ctx{&writer};
  std::unique_ptr<struct archive, ArchiveWriteDeleter> a(archive_write_new());
  auto lib_error = [&](const std::string& what) {
    return fail(ErrorKind::kInternal, ctx.gave_up ? "the archive's reader went away during the export"
                                                  : what + ": " + archive_message(a.get()));
  };
  if (archive_write_add_filter_zstd(a.get()) != ARCHIVE_OK || archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(a.get(), int(kBlock)) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(a.get(), 1) != ARCHIVE_OK) {
    return lib_error("cannot set up the zstd tar writer");
  }
  auto write_cb = [](struct archive*, void* c, const void* buf, size_t n) -> la_ssize_t {
    auto* ctx = static_cast<Ctx*>(c);
    if (!(*ctx->writer)(static_cast<const char*>(buf), n)) {
      ctx->gave_up = true;
      return -1;
    }
    ctx->bytes += n;
    return la_ssize_t(n);
  };
  if (archive_write_open2(a.get(), &ctx, nullptr, write_cb, nullptr, nullptr) != ARCHIVE_OK)
    return lib_error("cannot start the archive");

  auto header = [&](const std::string& name, uint64_t size, int perm, int64_t mtime) -> Result<void> {
    std::unique_ptr<struct archive_entry, EntryDeleter> e(archive_entry_new());
    archive_entry_set_pathname(e.get(), name.c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), perm);
    archive_entry_set_size(e.get(), la_int64_t(size));
    archive_entry_set_mtime(e.get(), mtime, 0);
    archive_entry_set_uid(e.get(), 0);
    archive_entry_set_gid(e.get(), 0);
    if (archive_write_header(a.get(), e.get()) != ARCHIVE_OK) return lib_error("cannot write " + name);
    return {};
  };
  const std::string index = index_.dump(1) + "\n";
  if (auto r = header(kIndexName, index.size(), 0644, index_["created_at"].get<int64_t>()); !r)
    return std::unexpected(r.error());
  if (archive_write_data(a.get(), index.data(), index.size()) != la_ssize_t(index.size()))
    return lib_error("cannot write the index");

  std::vector<char> buf(kBlock);
  for (const auto& entry : index_["entries"]) {
    const std::string key = entry["key"];
    std::vector<std::string> names = {"manifest.json"};
    for (const auto& [name, f] : entry["files"].items())
      if (name != "manifest.json") names.push_back(name);
    for (const auto& name : names) {
      const auto& want = entry["files"][name];
      Fd fd(::open((dir_ / key / name).c_str(), O_RDONLY | O_CLOEXEC));
      struct stat st {};
      if (fd.fd < 0 || ::fstat(fd.fd, &st) != 0)
        return fail(ErrorKind::kInternal, "cannot read " + key + "/" + name + ": " + std::strerror(errno));
      const uint64_t size = want["bytes"].get<uint64_t>();
      if (uint64_t(st.st_size) != size)
        return fail(ErrorKind::kInternal, key + "/" + name + " changed size since it was verified: export stopped");
      if (auto r = header(member_prefix(key) + name, size, (st.st_mode & 0111) ? 0755 : 0644, entry["created_at"].get<int64_t>());
          !r)
        return std::unexpected(r.error());
      Sha256 hash;
      uint64_t done = 0;
      while (done < size) {
        const ssize_t n = ::read(fd.fd, buf.data(), std::min<uint64_t>(buf.size(), size - done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return fail(ErrorKind::kInternal, "cannot read " + key + "/" + name + ": cut short");
        hash.update(buf.data(), size_t(n));
        if (archive_write_data(a.get(), buf.data(), size_t(n)) != n) return lib_error("cannot write " + key + "/" + name);
        done += uint64_t(n);
      }
      // The bytes that went out are the verified ones (bit rot since is caught here).
      if (hash.hex() != want["sha256"].get<std::string>())
        return fail(ErrorKind::kInternal, key + "/" + name + " no longer matches its sha256 (damaged on disk; `kforge cache verify` "
                                          "drops it): export stopped");
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) return lib_error("cannot finish the archive");
  if (ctx.gave_up) return lib_error("");
  return ctx.bytes;
}

Result<uint64_t> ExportSnapshot::write_file(const fs::path& path) const {
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp." + unique_suffix());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fail(ErrorKind::kInternal, "cannot create " + tmp.string() + ": " + std::strerror(errno));
  int write_errno = 0;
  auto written = write([&](const char* data, size_t n) {
    if (write_all(fd, data, n)) return true;
    write_errno = errno;
    return false;
  });
  const bool synced = written && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || !synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = !written ? (write_errno ? "cannot write " + path.string() + ": " + std::strerror(write_errno)
                                                    : written.error().message)
                                     : "cannot write " + path.string() + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return fail(ErrorKind::kInternal, why);
  }
  return written;
}

// --- import -----------------------------------------------------------------------------

json ImportReport::to_json() const {
  return {{"imported", imported},
          {"present", present},
          {"failed", json::array()},
          {"requests", {{"imported", requests_imported}, {"present", requests_present}}},
          {"bytes", bytes}};
}

namespace {

// The index, checked: every key, name and record well formed, pointers only to entries.
Result<json> check_index(const std::string& text) {
  json index = json::parse(text, nullptr, false);
  auto bad = [](const std::string& why) { return fail(ErrorKind::kBadRequest, std::string(kIndexName) + ": " + why); };
  if (!index.is_object() || index.value("format", "") != kFormatName) return bad("not a kforge cache export");
  if (index.value("version", 0) != kVersion)
    return bad("version " + index.value("version", json()).dump() + " is not one this kforge reads (1)");
  if (!index.contains("entries") || !index["entries"].is_array()) return bad("no entries list");
  std::set<std::string> keys;
  for (const auto& e : index["entries"]) {
    if (!e.is_object() || !e.contains("key") || !e["key"].is_string() || !is_hex_key(e["key"].get<std::string>()))
      return bad("an entry without a 64-hex key");
    const std::string key = e["key"];
    if (!keys.insert(key).second) return bad("entry " + key + " is listed twice");
    if (!e.contains("files") || !e["files"].is_object() || !e["files"].contains("manifest.json"))
      return bad("entry " + key + " lists no manifest.json");
    if (!e.contains("created_at") || !e["created_at"].is_number_integer()) return bad("entry " + key + " has no created_at");
    for (const auto& [name, f] : e["files"].items()) {
      if (!valid_name(name)) return bad("entry " + key + " names a file `" + name.substr(0, 64) + "` outside the grammar");
      if (!valid_record(f)) return bad("entry " + key + ", " + name + ": expected {\"sha256\", \"bytes\"}");
    }
  }
  if (!index.contains("requests")) index["requests"] = json::object();
  if (!index["requests"].is_object()) return bad("requests is not an object");
  for (const auto& [rkey, key] : index["requests"].items()) {
    if (!is_hex_key(rkey) || !key.is_string() || !keys.contains(key.get<std::string>()))
      return bad("request pointer " + rkey.substr(0, 64) + " does not point to an entry of the archive");
  }
  return index;
}

struct Staged {
  const json* files = nullptr;  // the index's records
  std::set<std::string> arrived;
  std::string failure;  // the first thing wrong with it
  json manifest;
};

}  // namespace

Result<ImportReport> import_archive(DiskTier& store, const fs::path& path) {
  auto staging = store.make_staging();
  if (!staging) return std::unexpected(staging.error());
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{*staging};

  json index;
  std::map<std::string, Staged> staged;
  std::string current;  // the entry being read
  std::string last_member = "(none)";
  // A failure of the archive as a whole: nothing more can be read from it.
  auto broken = [&](const std::string& reason) -> std::unexpected<Error> {
    size_t not_reached = 0;
    for (const auto& [key, s] : staged) {
      if (key != current && s.arrived.size() < s.files->size()) ++not_reached;
    }
    Error e = Error::make(ErrorKind::kBadRequest,
                          "the archive failed verification; nothing was imported: " +
                              (current.empty() ? std::string() : "entry " + current + ": ") + reason);
    e.extra = {{"imported", 0},
               {"present", 0},
               {"failed", json::array({{{"key", current}, {"reason", reason}}})},
               {"not_reached", not_reached}};
    return std::unexpected(std::move(e));
  };

  std::unique_ptr<struct archive, ArchiveReadDeleter> a(archive_read_new());
  archive_read_support_filter_zstd(a.get());
  archive_read_support_format_tar(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), kBlock) != ARCHIVE_OK)
    return broken("cannot read " + path.filename().string() + " as a zstd tar (damaged or cut short before its first entry "
                  "was read?): " + archive_message(a.get()));

  std::vector<char> buf(kBlock);
  for (bool first = true;; first = false) {
    struct archive_entry* e = nullptr;
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) {
      if (first) return broken("the archive is empty");
      break;
    }
    if (r != ARCHIVE_OK) {
      return broken("the archive is damaged or cut short after " + last_member + ": " + archive_message(a.get()));
    }
    if (first) {
      bool zstd = false;
      for (int i = 0; i < archive_filter_count(a.get()); ++i) zstd = zstd || archive_filter_code(a.get(), i) == ARCHIVE_FILTER_ZSTD;
      if (!zstd) return broken("not a zstd-compressed tar (kforge cache export writes one)");
    }
    const char* pathname = archive_entry_pathname(e);
    const std::string name = pathname ? pathname : "";
    if (name.empty()) return broken("a member after " + last_member + " has no name");
    const std::string shown = name.substr(0, 200);
    if (archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e) || archive_entry_symlink(e) ||
        !archive_entry_size_is_set(e) || archive_entry_size(e) < 0) {
      return broken("member " + shown + " is not a regular file with a size");
    }
    const uint64_t size = uint64_t(archive_entry_size(e));
    auto read_member = [&](auto&& sink) -> Result<void> {
      uint64_t got = 0;
      while (true) {
        const la_ssize_t n = archive_read_data(a.get(), buf.data(), buf.size());
        if (n < 0)
          return std::unexpected(broken("the archive is damaged or cut short while reading " + shown + ": " + archive_message(a.get())).error());
        if (n == 0) break;
        got += uint64_t(n);
        if (!sink(buf.data(), size_t(n))) return std::unexpected(broken("cannot write " + shown + " to the staging directory: " + std::strerror(errno)).error());
      }
      if (got != size) return std::unexpected(broken("member " + shown + " is cut short").error());
      return {};
    };

    if (first) {
      if (name != kIndexName) return broken("the first member is " + shown + ", not the index " + kIndexName);
      if (size > kMaxIndexBytes) return broken("the index is over 64 MiB");
      std::string text;
      if (auto rd = read_member([&](const char* d, size_t n) { text.append(d, n); return true; }); !rd)
        return std::unexpected(rd.error());
      auto checked = check_index(text);
      if (!checked) return broken(checked.error().message);
      index = std::move(*checked);
      uint64_t total = 0;
      for (const auto& entry : index["entries"]) {
        staged[entry["key"]].files = &entry["files"];
        for (const auto& [n, f] : entry["files"].items()) total += f["bytes"].get<uint64_t>();
      }
      std::error_code ec;
      const auto space = fs::space(*staging, ec);
      if (!ec && total > space.available) {
        return fail(ErrorKind::kInternal, "the archive unpacks to " + std::to_string(total) + " bytes; the cache's file system has " +
                                              std::to_string(space.available) + " free");
      }
      last_member = kIndexName;
      continue;
    }

    // v1/objects/<key[0:2]>/<key>/<NAME>
    current.clear();
    const std::string prefix = "v1/objects/";
    std::string key, rel;
    if (name.starts_with(prefix) && name.size() > prefix.size() + 3 + 65 && name[prefix.size() + 2] == '/' &&
        name[prefix.size() + 3 + 64] == '/') {
      key = name.substr(prefix.size() + 3, 64);
      rel = name.substr(prefix.size() + 3 + 65);
    }
    if (!is_hex_key(key) || name.compare(prefix.size(), 2, key, 0, 2) != 0 || !valid_name(rel))
      return broken("member " + shown + " is not a name an export writes (v1/objects/<k2>/<key>/<file>)");
    auto it = staged.find(key);
    if (it == staged.end()) return broken("member " + shown + " belongs to no entry of the index");
    current = key;
    Staged& s = it->second;
    if (!s.files->contains(rel)) return broken("member " + shown + " is not a file the index lists for the entry");
    if (s.arrived.contains(rel)) return broken("member " + shown + " appears twice");
    const auto& want = (*s.files)[rel];
    if (size != want["bytes"].get<uint64_t>()) {
      return broken("member " + shown + " has " + std::to_string(size) + " bytes, the index says " + want["bytes"].dump());
    }
    const fs::path dest = *staging / key / rel;
    std::error_code ec;
    fs::create_directories(dest.parent_path(), ec);
    Fd fd(::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                 (archive_entry_perm(e) & 0111) ? 0755 : 0644));
    if (fd.fd < 0) return fail(ErrorKind::kInternal, "cannot create " + dest.string() + ": " + std::strerror(errno));
    Sha256 hash;
    if (auto rd = read_member([&](const char* d, size_t n) {
          hash.update(d, n);
          return write_all(fd.fd, d, n);
        });
        !rd)
      return std::unexpected(rd.error());
    s.arrived.insert(rel);
    last_member = shown;
    if (const std::string got = hash.hex(); got != want["sha256"].get<std::string>() && s.failure.empty())
      s.failure = rel + ": sha256 " + got + " is not the " + want["sha256"].get<std::string>() + " the index lists";
  }
  current.clear();

  // Every entry complete, its files as listed, its manifest what the store publishes.
  json failed = json::array();
  for (const auto& entry : index["entries"]) {
    const std::string key = entry["key"];
    Staged& s = staged[key];
    if (s.failure.empty() && s.arrived.size() < s.files->size()) {
      std::string missing;
      for (const auto& [n, f] : s.files->items())
        if (!s.arrived.contains(n)) missing += (missing.empty() ? "" : ", ") + n;
      s.failure = "missing " + missing + ": the archive is truncated";
    }
    if (s.failure.empty()) {
      auto text = read_file(*staging / key / "manifest.json");
      s.manifest = text ? json::parse(*text, nullptr, false) : json();
      json listed = *s.files;
      listed.erase("manifest.json");
      const json& m = s.manifest;
      if (!m.is_object() || m.value("format", 0) != DiskTier::kFormat) s.failure = "manifest.json is not a format-1 manifest";
      else if (m.value("key", "") != key) s.failure = "manifest.json names key " + m.value("key", "").substr(0, 64) + ", not its directory's";
      else if (m.value("status", "") != "ok") s.failure = "manifest.json: status is not \"ok\"";
      else if (m.value("files", json()) != listed) s.failure = "manifest.json lists other files than the index";
    }
    if (!s.failure.empty()) failed.push_back({{"key", key}, {"reason", s.failure}});
  }
  if (!failed.empty()) {
    Error e = Error::make(ErrorKind::kBadRequest,
                          "the archive failed verification; nothing was imported: entry " + failed[0]["key"].get<std::string>() +
                              ": " + failed[0]["reason"].get<std::string>() +
                              (failed.size() > 1 ? " (and " + std::to_string(failed.size() - 1) + " more)" : ""));
    e.extra = {{"imported", 0}, {"present", 0}, {"failed", failed}, {"not_reached", 0}};
    return std::unexpected(std::move(e));
  }

  // Everything verified: publish, entry by entry, through the store's own path.
  ImportReport report;
  for (const auto& entry : index["entries"]) {
    const std::string key = entry["key"];
    for (const auto& [n, f] : entry["files"].items()) report.bytes += f["bytes"].get<uint64_t>();
    if (store.lookup(key)) {
      ++report.present;
      continue;
    }
    auto published = store.publish(*staging / key, key, std::move(staged[key].manifest));
    if (!published) {
      Error e = Error::make(ErrorKind::kInternal, "cannot publish " + key + " (after " + std::to_string(report.imported) +
                                                      " imported): " + published.error().message);
      e.extra = {{"imported", report.imported}, {"present", report.present}, {"failed", json::array({{{"key", key}, {"reason", published.error().message}}})}};
      return std::unexpected(std::move(e));
    }
    ++report.imported;
  }
  for (const auto& [rkey, key] : index["requests"].items()) {
    if (store.lookup_request(rkey)) {
      ++report.requests_present;
    } else if (store.put_request(rkey, key)) {
      ++report.requests_imported;
    } else {
      return fail(ErrorKind::kInternal, "cannot write request pointer " + rkey + " in " + store.root().string());
    }
  }
  return report;
}

}  // namespace kforge::core::storage
