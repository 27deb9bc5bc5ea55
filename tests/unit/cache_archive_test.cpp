// core/storage/archive: export and import of cache entries (issue 16), on real stores in
// scratch directories and real zstd tar archives; damaged archives are made by rewriting
// a good one with libarchive (a member changed, dropped or added) or by cutting its bytes.
#include "core/storage/archive.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"
#include "unit/scratch.hpp"

namespace kforge::core::storage {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Incompressible bytes, so that a byte flipped in the archive flips one byte of a blob.
std::string noise(int seed, size_t n) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// An "ok" entry as the builder publishes one: kernel.so, source.cpp, compile.log.
std::string add_entry(DiskTier& store, int n, const std::string& backend = "cpu", int64_t created_at = 1'700'000'000,
                      const std::string& arch = "x86-64-v3") {
  const std::string key = sha256_hex("kernel " + std::to_string(n));
  auto dir = store.make_staging();
  EXPECT_TRUE(dir);
  EXPECT_TRUE(write_file(*dir / "kernel.so", noise(n, 48 << 10)));
  EXPECT_TRUE(write_file(*dir / "source.cpp", "int k" + std::to_string(n) + "();\n"));
  EXPECT_TRUE(write_file(*dir / "compile.log", ""));
  auto m = store.publish(*dir, key,
                         {{"status", "ok"},
                          {"backend", backend},
                          {"archs", {arch}},
                          {"kernel_name", backend + "_kernel_" + key.substr(0, 12)},
                          {"created_at", created_at}});
  EXPECT_TRUE(m) << (m ? "" : m.error().message);
  return key;
}

// Rewrites a zstd tar member by member: `edit` may change a member's bytes (return true to
// keep it) or drop it (false); `extra` adds members at the end.
struct Member {
  std::string name;
  std::string data;
  unsigned type = AE_IFREG;
  std::string link;
};
void rewrite(const fs::path& in, const fs::path& out, const std::function<bool(Member&)>& edit,
             std::vector<Member> extra = {}) {
  struct archive* r = archive_read_new();
  archive_read_support_filter_zstd(r);
  archive_read_support_format_tar(r);
  ASSERT_EQ(archive_read_open_filename(r, in.c_str(), 1 << 16), ARCHIVE_OK);
  struct archive* w = archive_write_new();
  archive_write_add_filter_zstd(w);
  archive_write_set_format_pax_restricted(w);
  ASSERT_EQ(archive_write_open_filename(w, out.c_str()), ARCHIVE_OK);
  auto put = [&](const Member& m) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_filetype(e, m.type);
    archive_entry_set_perm(e, 0644);
    if (m.type == AE_IFLNK) archive_entry_set_symlink(e, m.link.c_str());
    archive_entry_set_size(e, m.type == AE_IFREG ? la_int64_t(m.data.size()) : 0);
    ASSERT_EQ(archive_write_header(w, e), ARCHIVE_OK) << archive_error_string(w);
    if (m.type == AE_IFREG) archive_write_data(w, m.data.data(), m.data.size());
    archive_entry_free(e);
  };
  struct archive_entry* e;
  while (archive_read_next_header(r, &e) == ARCHIVE_OK) {
    Member m{archive_entry_pathname(e), std::string(size_t(archive_entry_size(e)), '\0'), AE_IFREG, ""};
    archive_read_data(r, m.data.data(), m.data.size());
    if (edit(m)) put(m);
  }
  for (const auto& m : extra) put(m);
  archive_write_close(w);
  archive_write_free(w);
  archive_read_free(r);
}

class CacheArchive : public ::testing::Test {
 protected:
  fs::path export_all(DiskTier& store, ExportOptions opts = {}) {
    opts.kforge_version = "test";
    auto snap = ExportSnapshot::take(store, opts);
    EXPECT_TRUE(snap) << snap.error().message;
    const fs::path out = scratch_ / "cache.tar.zst";
    auto bytes = (*snap)->write_file(out);
    EXPECT_TRUE(bytes) << bytes.error().message;
    EXPECT_EQ(*bytes, fs::file_size(out));
    return out;
  }
  // The failure an import reports, with the store left empty.
  json failed_import(const fs::path& archive) {
    DiskTier fresh(scratch_ / ("fresh" + std::to_string(n_++)));
    auto r = import_archive(fresh, archive);
    EXPECT_FALSE(r) << "imported " << (r ? r->to_json().dump() : "");
    EXPECT_TRUE(fresh.keys().empty());
    EXPECT_TRUE(fresh.request_pointers().empty());
    for (const auto& e : fs::directory_iterator(fresh.staging_root())) EXPECT_EQ(e.path().filename(), ".lock");
    if (r) return json();
    EXPECT_EQ(r.error().kind, ErrorKind::kBadRequest) << r.error().message;
    json out = r.error().extra;
    out["message"] = r.error().message;
    return out;
  }
  testing::Scratch scratch_;
  int n_ = 0;
};

TEST_F(CacheArchive, RoundTripCarriesEntriesAndRequestPointers) {
  DiskTier a(scratch_ / "a");
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) keys.push_back(add_entry(a, i));
  const std::string rkey = sha256_hex("request 0"), dangling = sha256_hex("request x");
  ASSERT_TRUE(a.put_request(rkey, keys[0]));
  ASSERT_TRUE(a.put_request(dangling, sha256_hex("no such kernel")));
  const fs::path archive = export_all(a);

  DiskTier b(scratch_ / "b");
  auto r = import_archive(b, archive);
  ASSERT_TRUE(r) << r.error().message << " " << r.error().extra.dump();
  EXPECT_EQ(r->imported, 5u);
  EXPECT_EQ(r->present, 0u);
  EXPECT_EQ(r->requests_imported, 1u);
  for (const auto& key : keys) {
    auto m = b.lookup(key);
    ASSERT_TRUE(m) << key;
    EXPECT_EQ(*m->find("files"), (*a.lookup(key))["files"]);
    EXPECT_EQ(m->value("created_at", 0), 1'700'000'000);
    EXPECT_EQ(b.read_verified(key, "kernel.so"), a.read_verified(key, "kernel.so"));
  }
  EXPECT_EQ(b.lookup_request(rkey), keys[0]);
  EXPECT_FALSE(b.lookup_request(dangling));
  EXPECT_EQ(b.stats().entries, 5u);
}

TEST_F(CacheArchive, ImportIsIdempotent) {
  DiskTier a(scratch_ / "a");
  for (int i = 0; i < 3; ++i) add_entry(a, i);
  ASSERT_TRUE(a.put_request(sha256_hex("r"), sha256_hex("kernel 1")));
  const fs::path archive = export_all(a);
  DiskTier b(scratch_ / "b");
  ASSERT_TRUE(import_archive(b, archive));
  auto again = import_archive(b, archive);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->imported, 0u);
  EXPECT_EQ(again->present, 3u);
  EXPECT_EQ(again->requests_imported, 0u);
  EXPECT_EQ(again->requests_present, 1u);
  // Into the cache it came from, too.
  auto home = import_archive(a, archive);
  ASSERT_TRUE(home);
  EXPECT_EQ(home->present, 3u);
  EXPECT_EQ(b.stats().entries, 3u);
}

TEST_F(CacheArchive, NegativeAndCorruptEntriesStayHome) {
  DiskTier a(scratch_ / "a");
  const std::string good = add_entry(a, 1);
  const std::string rotten = add_entry(a, 2);
  auto dir = a.make_staging();
  ASSERT_TRUE(write_file(*dir / "compile.log", "error: no\n"));
  const std::string failed = sha256_hex("failed");
  ASSERT_TRUE(a.publish(*dir, failed, {{"status", "failed"}, {"expires_at", a.now_seconds() + 600}}));
  {  // a byte flipped beneath the store's memo
    const fs::path so = a.entry_dir(rotten) / "kernel.so";
    std::string bytes = *read_file(so);
    bytes[100] ^= 1;
    ASSERT_TRUE(write_file(so, bytes));
  }
  DiskTier fresh(scratch_ / "a");  // another process: no memo
  auto snap = ExportSnapshot::take(fresh, {});
  ASSERT_TRUE(snap);
  ASSERT_EQ((*snap)->entries(), 1u);
  EXPECT_EQ((*snap)->index()["entries"][0]["key"], good);
}

TEST_F(CacheArchive, SinceAndMatchChooseEntries) {
  DiskTier a(scratch_ / "a");
  const std::string old_cpu = add_entry(a, 1, "cpu", 1'600'000'000);
  const std::string new_cpu = add_entry(a, 2, "cpu", 1'800'000'000, "znver4");
  const std::string new_cuda = add_entry(a, 3, "cuda", 1'800'000'000, "sm_90a");
  auto opts = [](std::optional<int64_t> since, std::vector<ExportMatch> matches = {}) {
    ExportOptions o;
    o.since = since;
    o.matches = std::move(matches);
    return o;
  };
  auto chosen = [&](ExportOptions o) {
    std::set<std::string> keys;
    auto snap = ExportSnapshot::take(a, o);
    EXPECT_TRUE(snap);
    for (const auto& e : (*snap)->index()["entries"]) keys.insert(e["key"].get<std::string>());
    return keys;
  };
  auto since = parse_since("2025-01-01");
  ASSERT_TRUE(since);
  EXPECT_EQ(*since, 1'735'689'600);
  EXPECT_EQ(chosen(opts(*since)), (std::set<std::string>{new_cpu, new_cuda}));
  EXPECT_EQ(chosen(opts(1'800'000'000)), (std::set<std::string>{new_cpu, new_cuda}));
  EXPECT_EQ(chosen(opts(1'800'000'001)), (std::set<std::string>{}));
  auto m = [](const char* s) { return *parse_match(s); };
  EXPECT_EQ(chosen(opts(std::nullopt, {m("backend=cpu")})), (std::set<std::string>{old_cpu, new_cpu}));
  EXPECT_EQ(chosen(opts(*since, {m("backend=cpu")})), (std::set<std::string>{new_cpu}));
  EXPECT_EQ(chosen(opts(std::nullopt, {m("arch=sm_*")})), (std::set<std::string>{new_cuda}));
  EXPECT_EQ(chosen(opts(std::nullopt, {m(("key=" + old_cpu.substr(0, 6) + "*").c_str())})), (std::set<std::string>{old_cpu}));
  EXPECT_EQ(chosen(opts(std::nullopt, {m("template=")})).size(), 3u);  // source mode: no template
  EXPECT_EQ(chosen(opts(std::nullopt, {m("template=gemm")})).size(), 0u);
  EXPECT_EQ(chosen(opts(std::nullopt, {m("template=*")})).size(), 0u);  // "" is matched by "" alone
  // A template kernel's manifest names its template as TemplateSpec::to_json() does.
  const std::string gemm = [&] {
    auto dir = a.make_staging();
    EXPECT_TRUE(write_file(*dir / "kernel.so", "gemm"));
    const std::string key = sha256_hex("gemm kernel");
    EXPECT_TRUE(a.publish(*dir, key,
                          {{"status", "ok"}, {"backend", "cpu"}, {"archs", {"x86-64-v3"}}, {"kernel_name", "cpu_gemm_1"},
                           {"created_at", 1'800'000'000},
                           {"template", {{"template", "gemm"}, {"params", json::object()}, {"reference", false}}}}));
    return key;
  }();
  EXPECT_EQ(chosen(opts(std::nullopt, {m("template=gemm")})), (std::set<std::string>{gemm}));
  EXPECT_EQ(chosen(opts(std::nullopt, {m("template=g*")})), (std::set<std::string>{gemm}));
  EXPECT_EQ(chosen(opts(std::nullopt, {m("template=*")})), (std::set<std::string>{gemm}));
  EXPECT_EQ(chosen(opts(std::nullopt, {m("template=")})).size(), 3u);
  EXPECT_EQ(chosen(opts(std::nullopt, {m("template=conv")})).size(), 0u);
  EXPECT_EQ(chosen(opts(std::nullopt, {m("kernel_name=cuda_*")})), (std::set<std::string>{new_cuda}));

  EXPECT_EQ(*parse_since("1700000000"), 1'700'000'000);
  EXPECT_EQ(*parse_since("2024-06-10T12:00:00Z"), 1'718'020'800);
  EXPECT_EQ(*parse_since("2024-06-10T12:00"), 1'718'020'800);
  for (const char* bad : {"", "yesterday", "2024-13-01", "2024-06-10T25:00", "-5", "2024-6-1"}) {
    auto r = parse_since(bad, "--since");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().fields.at(0).field, "--since");
  }
  for (const char* bad : {"backend", "colour=red", "=x"}) EXPECT_FALSE(parse_match(bad)) << bad;
}

TEST_F(CacheArchive, FlippedByteInABlobImportsNothingAndNamesTheEntry) {
  DiskTier a(scratch_ / "a");
  std::vector<std::string> keys;
  for (int i = 0; i < 3; ++i) keys.push_back(add_entry(a, i));
  const fs::path good = export_all(a);
  // Entry 1's kernel.so with one bit changed, the archive otherwise as written.
  const fs::path bad = scratch_ / "bad.tar.zst";
  rewrite(good, bad, [&](Member& m) {
    if (m.name.find(keys[1] + "/kernel.so") != std::string::npos) m.data[4000] ^= 0x10;
    return true;
  });
  json f = failed_import(bad);
  ASSERT_EQ(f["failed"].size(), 1u) << f.dump();
  EXPECT_EQ(f["failed"][0]["key"], keys[1]);
  EXPECT_NE(f["failed"][0]["reason"].get<std::string>().find("kernel.so: sha256"), std::string::npos) << f.dump();
  EXPECT_NE(f["message"].get<std::string>().find(keys[1]), std::string::npos);

  // A byte flipped in the compressed file itself: the blobs are incompressible, so the
  // middle of the file is the middle of a blob (or a block the decoder refuses).
  std::string bytes = *read_file(good);
  bytes[bytes.size() / 2] ^= 0x01;
  const fs::path flipped = scratch_ / "flipped.tar.zst";
  ASSERT_TRUE(write_file(flipped, bytes));
  f = failed_import(flipped);
  ASSERT_FALSE(f["failed"].empty()) << f.dump();
  EXPECT_NE(std::find(keys.begin(), keys.end(), f["failed"][0]["key"].get<std::string>()), keys.end()) << f.dump();
}

TEST_F(CacheArchive, TruncatedArchiveNamesWhatIsMissing) {
  DiskTier a(scratch_ / "a");
  std::vector<std::string> keys;
  // libarchive decompresses 128 KiB at a time: enough entries that a cut falls past the first.
  for (int i = 0; i < 8; ++i) keys.push_back(add_entry(a, i));
  const fs::path good = export_all(a);
  std::sort(keys.begin(), keys.end());  // the index's order

  // Cut at a member boundary: the tar ends cleanly, the index says what never came.
  const fs::path short_tar = scratch_ / "short.tar.zst";
  rewrite(good, short_tar, [&](Member& m) { return m.name.find(keys[7] + "/source.cpp") == std::string::npos; });
  json f = failed_import(short_tar);
  ASSERT_EQ(f["failed"].size(), 1u) << f.dump();
  EXPECT_EQ(f["failed"][0]["key"], keys[7]);
  EXPECT_EQ(f["failed"][0]["reason"], "missing source.cpp: the archive is truncated");

  // Cut mid-stream: libarchive's error, naming the entry it was reading.
  std::string bytes = *read_file(good);
  const fs::path cut = scratch_ / "cut.tar.zst";
  ASSERT_TRUE(write_file(cut, bytes.substr(0, bytes.size() * 2 / 3)));
  f = failed_import(cut);
  ASSERT_EQ(f["failed"].size(), 1u) << f.dump();
  EXPECT_NE(std::find(keys.begin(), keys.end(), f["failed"][0]["key"].get<std::string>()), keys.end()) << f.dump();
  EXPECT_NE(f["failed"][0]["reason"].get<std::string>().find("cut short"), std::string::npos) << f.dump();

  // Cut within the first block: nothing was read, and it says so.
  ASSERT_TRUE(write_file(cut, bytes.substr(0, 40)));
  f = failed_import(cut);
  ASSERT_EQ(f["failed"].size(), 1u) << f.dump();
  EXPECT_NE(f["failed"][0]["reason"].get<std::string>().find("cut short"), std::string::npos) << f.dump();
}

TEST_F(CacheArchive, MembersOutsideTheGrammarAreRefused) {
  DiskTier a(scratch_ / "a");
  const std::string key = add_entry(a, 1);
  const fs::path good = export_all(a);
  const fs::path bad = scratch_ / "bad.tar.zst";
  const std::string dir = "v1/objects/" + key.substr(0, 2) + "/" + key + "/";
  const std::vector<Member> hostile = {
      {"../../escaped.so", "x", AE_IFREG, ""},
      {"/etc/escaped", "x", AE_IFREG, ""},
      {dir + "../../../../escaped", "x", AE_IFREG, ""},
      {dir + "bench/../../x", "x", AE_IFREG, ""},
      {dir + ".hidden", "x", AE_IFREG, ""},
      {dir + "kernel.so.extra", "x", AE_IFREG, ""},  // not a file the index lists
      {dir + "evil", "", AE_IFLNK, "/etc/passwd"},
      {dir + "dev", "", AE_IFCHR, ""},
      {"v1/requests/ab/" + key, key, AE_IFREG, ""},
  };
  for (const auto& m : hostile) {
    rewrite(good, bad, [](Member&) { return true; }, {m});
    json f = failed_import(bad);
    ASSERT_EQ(f["failed"].size(), 1u) << m.name << ": " << f.dump();
    const std::string reason = f["failed"][0]["reason"];
    EXPECT_TRUE(reason.find("not a name an export writes") != std::string::npos ||
                reason.find("not a regular file") != std::string::npos ||
                reason.find("not a file the index lists") != std::string::npos)
        << m.name << ": " << reason;
    EXPECT_FALSE(fs::exists(scratch_ / "escaped.so"));
    EXPECT_FALSE(fs::exists(scratch_.path().parent_path() / "escaped.so"));
  }
  // An index that lies about a size, or a file listed twice.
  rewrite(good, bad, [&](Member& m) {
    if (m.name == dir + "source.cpp") m.data += "more";
    return true;
  });
  EXPECT_NE(failed_import(bad)["failed"][0]["reason"].get<std::string>().find("the index says"), std::string::npos);
  rewrite(good, bad, [](Member&) { return true; }, {{dir + "source.cpp", *read_file(a.entry_dir(key) / "source.cpp"), AE_IFREG, ""}});
  EXPECT_NE(failed_import(bad)["failed"][0]["reason"].get<std::string>().find("appears twice"), std::string::npos);
  // An index of another format, and a plain tar.
  rewrite(good, bad, [](Member& m) {
    if (m.name == "kforge-export.json") m.data = R"({"format": "kforge-cache-export", "version": 2, "entries": []})";
    return true;
  });
  EXPECT_NE(failed_import(bad)["message"].get<std::string>().find("version 2"), std::string::npos);
  ASSERT_TRUE(write_file(bad, "not an archive at all"));
  EXPECT_FALSE(failed_import(bad)["failed"].empty());
}

TEST_F(CacheArchive, ManifestMustMatchItsDirectoryAndTheIndex) {
  DiskTier a(scratch_ / "a");
  const std::string key = add_entry(a, 1);
  const fs::path good = export_all(a);
  // A manifest rewritten to claim another key, with the index updated to match its hash:
  // consistent bytes, but not an entry the store would have published under this key.
  const fs::path bad = scratch_ / "bad.tar.zst";
  json manifest = *a.lookup(key);
  manifest["key"] = sha256_hex("other");
  const std::string text = manifest.dump(2);
  rewrite(good, bad, [&](Member& m) {
    if (m.name == "kforge-export.json") {
      json index = json::parse(m.data);
      index["entries"][0]["files"]["manifest.json"] = {{"sha256", sha256_hex(text)}, {"bytes", text.size()}};
      m.data = index.dump();
    } else if (m.name.ends_with("/manifest.json")) {
      m.data = text;
    }
    return true;
  });
  json f = failed_import(bad);
  ASSERT_EQ(f["failed"].size(), 1u);
  EXPECT_NE(f["failed"][0]["reason"].get<std::string>().find("not its directory's"), std::string::npos) << f.dump();
}

}  // namespace
}  // namespace kforge::core::storage
