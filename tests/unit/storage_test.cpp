#include "core/storage/disk_tier.hpp"
#include "core/storage/storage.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iostream>

#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"
#include "unit/scratch.hpp"

namespace kforge::core::storage {
namespace {

namespace fs = std::filesystem;
const std::string kKey = sha256_hex("a kernel");

fs::path staged(DiskTier& store, const std::string& so_bytes) {
  auto dir = store.make_staging();
  EXPECT_TRUE(dir);
  EXPECT_TRUE(write_file(*dir / "kernel.so", so_bytes));
  EXPECT_TRUE(write_file(*dir / "compile.log", "ok\n"));
  return *dir;
}

// The staging area holds nothing but this process's lock.
bool staging_is_clear(const DiskTier& store) {
  for (const auto& e : fs::directory_iterator(store.staging_root())) {
    if (e.path().filename() != ".lock") return false;
  }
  return true;
}

TEST(DiskTier, PublishThenLookup) {
  testing::Scratch s;
  DiskTier store(s.path());
  auto m = store.publish(staged(store, "ELF"), kKey, {{"status", "ok"}});
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ((*m)["files"]["kernel.so"]["sha256"], sha256_hex("ELF"));
  EXPECT_TRUE(fs::exists(store.entry_dir(kKey) / "manifest.json"));
  EXPECT_EQ(store.entry_dir(kKey).parent_path().filename(), kKey.substr(0, 2));
  auto found = store.lookup(kKey);
  ASSERT_TRUE(found);
  EXPECT_EQ((*found)["key"], kKey);
  EXPECT_TRUE(staging_is_clear(store));
}

// Flips one byte of a file in place: same size, same inode, different bytes.
void flip_byte(const fs::path& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(1);
  const char c = char(f.get());
  f.seekp(1);
  f.put(char(c ^ 0x5a));
}

// Verification is memoised per file identity, and only for files older than a second (a
// write within the file system's timestamp granularity could keep the identity): the
// store's clock is moved past that second so that the memo is really used.
TEST(DiskTier, AFlippedByteIsNeverServedAfterTheVerificationIsMemoised) {
  testing::Scratch s;
  DiskTier store(s.path());
  ASSERT_TRUE(store.publish(staged(store, "ELF-bytes-of-a-kernel"), kKey, {{"status", "ok"}}));
  store.advance_clock(std::chrono::milliseconds(1100));
  auto first = store.lookup(kKey);
  ASSERT_TRUE(first);
  EXPECT_EQ(store.lookup(kKey), first) << "an unchanged entry is answered from the memo";
  EXPECT_EQ(store.read_verified(kKey, "kernel.so"), "ELF-bytes-of-a-kernel");

  flip_byte(store.entry_dir(kKey) / "kernel.so");
  EXPECT_FALSE(store.read_verified(kKey, "kernel.so")) << "the changed file's identity changed: hashed again";
  EXPECT_FALSE(store.lookup(kKey));
  EXPECT_FALSE(fs::exists(store.entry_dir(kKey)));
}

// An answer that only names the entry (a POST hit) trusts the memo for a tenth of a
// second; after that, a changed file makes the entry a miss.
TEST(DiskTier, ALookupSeesAChangedFileWithinATenthOfASecond) {
  testing::Scratch s;
  DiskTier store(s.path());
  ASSERT_TRUE(store.publish(staged(store, "ELF-bytes-of-a-kernel"), kKey, {{"status", "ok"}}));
  store.advance_clock(std::chrono::milliseconds(1100));
  ASSERT_TRUE(store.lookup(kKey));
  flip_byte(store.entry_dir(kKey) / "compile.log");
  store.advance_clock(std::chrono::milliseconds(150));
  EXPECT_FALSE(store.lookup(kKey));
  EXPECT_FALSE(fs::exists(store.entry_dir(kKey)));
}

TEST(DiskTier, AFileReplacedAfterTheMemoIsHashedAgain) {
  testing::Scratch s;
  DiskTier store(s.path());
  ASSERT_TRUE(store.publish(staged(store, "good"), kKey, {{"status", "ok"}}));
  store.advance_clock(std::chrono::milliseconds(1100));
  ASSERT_TRUE(store.lookup(kKey));
  // Another inode under the same name, same size: the memo's identity no longer holds.
  const fs::path so = store.entry_dir(kKey) / "kernel.so";
  ASSERT_TRUE(write_file(so.string() + ".new", "evil"));
  fs::rename(so.string() + ".new", so);
  EXPECT_FALSE(store.read_verified(kKey, "kernel.so"));
  EXPECT_FALSE(store.lookup(kKey));
}

TEST(DiskTier, VerifyAllHashesEverythingWhateverTheMemoSays) {
  testing::Scratch s;
  DiskTier store(s.path());
  ASSERT_TRUE(store.publish(staged(store, "ELF-bytes"), kKey, {{"status", "ok"}}));
  store.advance_clock(std::chrono::milliseconds(1100));
  ASSERT_TRUE(store.lookup(kKey));
  EXPECT_EQ(store.verify_all().removed.size(), 0u);
  flip_byte(store.entry_dir(kKey) / "kernel.so");
  EXPECT_EQ(store.verify_all().removed, std::vector<std::string>{kKey});
}

TEST(DiskTier, CorruptFileIsAMissAndTheEntryIsRemoved) {
  testing::Scratch s;
  DiskTier store(s.path());
  ASSERT_TRUE(store.publish(staged(store, "ELF-bytes"), kKey, {{"status", "ok"}}));
  {
    std::fstream f(store.entry_dir(kKey) / "kernel.so",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1);
    f.put('X');  // same size, different bytes
  }
  EXPECT_FALSE(store.lookup(kKey));
  EXPECT_FALSE(fs::exists(store.entry_dir(kKey)));
}

TEST(DiskTier, LosingPublisherGetsTheWinnersEntry) {
  testing::Scratch s;
  DiskTier store(s.path());
  auto a = staged(store, "first");
  auto b = staged(store, "second");
  ASSERT_TRUE(store.publish(a, kKey, {{"status", "ok"}}));
  auto m = store.publish(b, kKey, {{"status", "ok"}});
  ASSERT_TRUE(m);
  EXPECT_EQ((*m)["files"]["kernel.so"]["sha256"], sha256_hex("first"));
  EXPECT_FALSE(fs::exists(b));
}

TEST(DiskTier, NegativeEntriesExpire) {
  testing::Scratch s;
  DiskTier store(s.path());
  ASSERT_TRUE(store.publish(staged(store, ""), kKey,
                            {{"status", "failed"}, {"expires_at", store.now_seconds() + 60}}));
  EXPECT_TRUE(store.lookup(kKey));
  store.advance_clock(std::chrono::seconds(61));
  EXPECT_FALSE(store.lookup(kKey));
  EXPECT_FALSE(fs::exists(store.entry_dir(kKey)));
}

TEST(DiskTier, ClearStagingRemovesLeftovers) {
  testing::Scratch s;
  DiskTier store(s.path());
  staged(store, "half");
  staged(store, "written");
  EXPECT_EQ(store.clear_staging(), 2u);
  EXPECT_TRUE(staging_is_clear(store));
}

TEST(DiskTier, RequestKeysPointAtKernelKeys) {
  testing::Scratch s;
  DiskTier store(s.path());
  const std::string rkey = sha256_hex("request");
  EXPECT_FALSE(store.lookup_request(rkey));
  ASSERT_TRUE(store.put_request(rkey, kKey));
  EXPECT_EQ(store.lookup_request(rkey), kKey);
}

// The facade over two real tiers (a second disk tier stands where Redis stands in a
// cluster): a get copies the shared tier's entry in, verified; a publish shares; request
// pointers and autotune rankings go both ways; a shared tier with a corrupt copy is a miss.
// The Kernels view's listing (issue 40): newest first, filtered, paged by cursor; a memo of
// each manifest's summary by its identity, so a second listing of 10,000 entries reads no
// manifest (one stat each) and an entry published again under its key is read again.
TEST(DiskTier, ListPagesAndFiltersTheEntries) {
  testing::Scratch s;
  DiskTier store(s.path());
  auto publish = [&](int n, const std::string& backend, const std::string& tmpl, const std::string& status) {
    const std::string key = sha256_hex("listed " + std::to_string(n));
    nlohmann::json m = {{"status", status}, {"backend", backend}, {"archs", {backend == "cpu" ? "x86-64-v3" : "sm_90a"}},
                        {"kernel_name", backend + (tmpl.empty() ? "_kernel_" : "_gemm_") + key.substr(0, 12)},
                        {"created_at", 1'700'000'000 + n}};
    if (!tmpl.empty()) m["template"] = {{"template", tmpl}, {"params", nlohmann::json::object()}};
    if (status == "failed") m["expires_at"] = store.now_seconds() + (n == 4 ? -1 : 600);
    EXPECT_TRUE(store.publish(staged(store, "ELF " + std::to_string(n)), key, m));
    return key;
  };
  std::vector<std::string> keys;
  for (int n = 0; n < 6; ++n)
    keys.push_back(publish(n, n % 2 ? "cuda" : "cpu", n < 3 ? "gemm" : "", n >= 4 ? "failed" : "ok"));
  auto listed = [&](DiskTier::ListQuery q) {
    std::vector<std::string> out;
    for (const auto& e : store.list(q).entries) out.push_back(e.key);
    return out;
  };
  // Entry 4 is an expired negative entry: not listed.
  EXPECT_EQ(listed({}), (std::vector<std::string>{keys[5], keys[3], keys[2], keys[1], keys[0]}));
  EXPECT_EQ(store.list({}).total, 5u);
  EXPECT_EQ(listed({.backend = "cuda"}), (std::vector<std::string>{keys[5], keys[3], keys[1]}));
  EXPECT_EQ(listed({.status = "failed"}), (std::vector<std::string>{keys[5]}));
  EXPECT_EQ(listed({.template_name = "gemm"}), (std::vector<std::string>{keys[2], keys[1], keys[0]}));
  EXPECT_EQ(listed({.template_name = ""}), (std::vector<std::string>{keys[5], keys[3]}));
  EXPECT_EQ(listed({.key_prefix = keys[2].substr(0, 10)}), (std::vector<std::string>{keys[2]}));
  EXPECT_EQ(listed({.name = "CUDA_GEMM"}), (std::vector<std::string>{keys[1]}));
  const auto first = store.list({.limit = 2});
  ASSERT_EQ(first.entries.size(), 2u);
  EXPECT_EQ(first.total, 5u);
  EXPECT_EQ(first.next, DiskTier::cursor_of(first.entries[1]));
  const auto second = store.list({.limit = 2, .after = first.next});
  EXPECT_EQ(second.entries[0].key, keys[2]);
  const auto last = store.list({.limit = 2, .after = second.next});
  EXPECT_EQ(last.entries.size(), 1u);
  EXPECT_EQ(last.entries[0].key, keys[0]);
  EXPECT_EQ(last.next, "");
  const auto summary = store.list({.key_prefix = keys[0]}).entries.at(0).to_json();
  EXPECT_EQ(summary["template"], "gemm");
  EXPECT_EQ(summary["archs"], nlohmann::json({"x86-64-v3"}));
  EXPECT_EQ(summary["bytes"], 5 + 3);  // kernel.so and compile.log

  // Removed, then published again under its key with another manifest: read again.
  store.remove_entry(keys[0]);
  EXPECT_EQ(store.list({.key_prefix = keys[0]}).total, 0u);
  EXPECT_TRUE(store.publish(staged(store, "ELF again"), keys[0],
                            {{"status", "ok"}, {"backend", "rocm"}, {"kernel_name", "rocm_kernel_x"}, {"created_at", 1}}));
  EXPECT_EQ(store.list({.key_prefix = keys[0]}).entries.at(0).backend, "rocm");

  // 10,000 entries (manifests written in place: publishing each would fsync 10,000 times).
  for (int n = 0; n < 10'000; ++n) {
    const std::string key = sha256_hex("many " + std::to_string(n));
    fs::create_directories(store.entry_dir(key));
    ASSERT_TRUE(write_file(store.entry_dir(key) / "manifest.json",
                           nlohmann::json{{"format", 1}, {"key", key}, {"status", "ok"}, {"backend", "cpu"},
                                          {"kernel_name", "cpu_kernel_" + key.substr(0, 12)},
                                          {"created_at", 1'600'000'000 + n}, {"files", nlohmann::json::object()}}
                               .dump()));
  }
  auto timed = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    const auto page = store.list({.name = "kernel", .limit = 50});
    EXPECT_EQ(page.total, 10'000u + 3);  // and the cpu, cuda and rocm "kernel"s above
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double cold = timed(), warm = timed();
  std::cerr << "list of 10,006 entries: " << cold << " s cold, " << warm << " s from the memo\n";
  EXPECT_LT(warm, 2.0);  // ~20 ms on the 2-core dev machine
}

TEST(Storage, TheFacadeCopiesBetweenTiers) {
  testing::Scratch s;
  DiskTier local(s.path() / "local"), other(s.path() / "shared");
  Storage storage(local, &other);
  // Published through the facade: in both tiers.
  auto m = storage.publish(staged(local, "ELF-shared"), kKey, {{"status", "ok"}});
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_TRUE(other.has(kKey));
  // Another instance (a fresh local tier) finds it in the shared tier and copies it in.
  DiskTier second(s.path() / "second");
  Storage storage2(second, &other);
  EXPECT_FALSE(second.has(kKey));
  auto found = storage2.find(kKey);
  ASSERT_TRUE(found);
  EXPECT_EQ((*found)["files"]["kernel.so"]["sha256"], sha256_hex("ELF-shared"));
  EXPECT_EQ(second.read_verified(kKey, "kernel.so"), "ELF-shared");
  // Request pointers and rankings.
  const std::string rkey = sha256_hex("request"), akey = sha256_hex("autotune");
  ASSERT_TRUE(storage.remember_request(rkey, kKey));
  EXPECT_EQ(storage2.find_request(rkey), kKey);
  EXPECT_FALSE(storage2.find_request(sha256_hex("other"), /*local_only=*/true));
  storage.remember_autotune(akey, {{"autotune_key", akey}, {"winner", 1}});
  EXPECT_EQ(storage2.find_autotune(akey).value_or(nullptr)["winner"], 1);
  // A corrupt copy in the shared tier is dropped there and never copied in.
  const std::string k2 = sha256_hex("a second kernel");
  ASSERT_TRUE(other.publish(staged(other, "good bytes"), k2, {{"status", "ok"}}));
  flip_byte(other.entry_dir(k2) / "kernel.so");
  DiskTier third(s.path() / "third");
  Storage storage3(third, &other);
  EXPECT_FALSE(storage3.find(k2));
  EXPECT_FALSE(third.has(k2));
}

// An entry from another tier names its files: one that climbs out of the staging area, or
// whose bytes do not match their hash, is refused whole.
TEST(Storage, APutWithAHostileOrWrongFileIsRefused) {
  testing::Scratch s;
  DiskTier tier(s.path());
  Entry bad{{{"key", kKey}, {"status", "ok"}, {"files", {{"../../escaped", {{"sha256", sha256_hex("x")}, {"bytes", 1}}}}}},
            {{"../../escaped", "x"}}};
  EXPECT_FALSE(tier.put(bad));
  EXPECT_FALSE(fs::exists(s.path() / "escaped"));
  Entry wrong{{{"key", kKey}, {"status", "ok"}, {"files", {{"kernel.so", {{"sha256", sha256_hex("x")}, {"bytes", 1}}}}}},
              {{"kernel.so", "y"}}};
  EXPECT_FALSE(tier.put(wrong));
  EXPECT_FALSE(tier.has(kKey));
  Entry good{{{"key", kKey}, {"status", "ok"}, {"files", {{"kernel.so", {{"sha256", sha256_hex("x")}, {"bytes", 1}}}}}},
             {{"kernel.so", "x"}}};
  EXPECT_TRUE(tier.put(good));
  EXPECT_TRUE(tier.has(kKey));
  EXPECT_TRUE(staging_is_clear(tier));
}

// Side files of an entry: benchmark results by name, the ranking; names are checked.
TEST(Storage, BenchResultsAndRankingsLiveBesideTheEntry) {
  testing::Scratch s;
  DiskTier tier(s.path());
  EXPECT_FALSE(tier.put_bench_result(kKey, "abc", {{"median_ms", 1}})) << "no entry, no result";
  ASSERT_TRUE(tier.publish(staged(tier, "ELF"), kKey, {{"status", "ok"}}));
  EXPECT_TRUE(tier.put_bench_result(kKey, "0123abcd-4567", {{"median_ms", 1.5}}));
  EXPECT_FALSE(tier.put_bench_result(kKey, "../manifest", {{"x", 1}}));
  EXPECT_EQ(tier.bench_result(kKey, "0123abcd-4567").value_or(nullptr)["median_ms"], 1.5);
  EXPECT_EQ(tier.bench_results(kKey).size(), 1u);
  EXPECT_TRUE(tier.put_ranking(kKey, {{"winner", 2}}));
  EXPECT_EQ(tier.ranking(kKey).value_or(nullptr)["winner"], 2);
  EXPECT_TRUE(tier.lookup(kKey)) << "side files are outside the manifest: the entry still verifies";
}

TEST(Hash, KnownDigestAndKeyShape) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(is_hex_key(sha256_hex("x")));
  EXPECT_FALSE(is_hex_key("../../etc/passwd"));
  EXPECT_FALSE(is_hex_key(std::string(64, 'A')));
  EXPECT_FALSE(is_hex_key(std::string(63, 'a')));
}

}  // namespace
}  // namespace kforge::core::storage
