#include "core/store.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "core/fsutil.hpp"
#include "core/hash.hpp"
#include "unit/scratch.hpp"

namespace kforge::core {
namespace {

namespace fs = std::filesystem;
const std::string kKey = sha256_hex("a kernel");

fs::path staged(DiskStore& store, const std::string& so_bytes) {
  auto dir = store.make_staging();
  EXPECT_TRUE(dir);
  EXPECT_TRUE(write_file(*dir / "kernel.so", so_bytes));
  EXPECT_TRUE(write_file(*dir / "compile.log", "ok\n"));
  return *dir;
}

// The staging area holds nothing but this process's lock.
bool staging_is_clear(const DiskStore& store) {
  for (const auto& e : fs::directory_iterator(store.staging_root())) {
    if (e.path().filename() != ".lock") return false;
  }
  return true;
}

TEST(Store, PublishThenLookup) {
  testing::Scratch s;
  DiskStore store(s.path());
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
// write within the file system's timestamp granularity could keep the identity): wait out
// that second so that the memo is really used.
TEST(Store, AFlippedByteIsNeverServedAfterTheVerificationIsMemoised) {
  testing::Scratch s;
  DiskStore store(s.path());
  ASSERT_TRUE(store.publish(staged(store, "ELF-bytes-of-a-kernel"), kKey, {{"status", "ok"}}));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
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
TEST(Store, ALookupSeesAChangedFileWithinATenthOfASecond) {
  testing::Scratch s;
  DiskStore store(s.path());
  ASSERT_TRUE(store.publish(staged(store, "ELF-bytes-of-a-kernel"), kKey, {{"status", "ok"}}));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(store.lookup(kKey));
  flip_byte(store.entry_dir(kKey) / "compile.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_FALSE(store.lookup(kKey));
  EXPECT_FALSE(fs::exists(store.entry_dir(kKey)));
}

TEST(Store, AFileReplacedAfterTheMemoIsHashedAgain) {
  testing::Scratch s;
  DiskStore store(s.path());
  ASSERT_TRUE(store.publish(staged(store, "good"), kKey, {{"status", "ok"}}));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(store.lookup(kKey));
  // Another inode under the same name, same size: the memo's identity no longer holds.
  const fs::path so = store.entry_dir(kKey) / "kernel.so";
  ASSERT_TRUE(write_file(so.string() + ".new", "evil"));
  fs::rename(so.string() + ".new", so);
  EXPECT_FALSE(store.read_verified(kKey, "kernel.so"));
  EXPECT_FALSE(store.lookup(kKey));
}

TEST(Store, VerifyAllHashesEverythingWhateverTheMemoSays) {
  testing::Scratch s;
  DiskStore store(s.path());
  ASSERT_TRUE(store.publish(staged(store, "ELF-bytes"), kKey, {{"status", "ok"}}));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(store.lookup(kKey));
  EXPECT_EQ(store.verify_all().removed.size(), 0u);
  flip_byte(store.entry_dir(kKey) / "kernel.so");
  EXPECT_EQ(store.verify_all().removed, std::vector<std::string>{kKey});
}

TEST(Store, CorruptFileIsAMissAndTheEntryIsRemoved) {
  testing::Scratch s;
  DiskStore store(s.path());
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

TEST(Store, LosingPublisherGetsTheWinnersEntry) {
  testing::Scratch s;
  DiskStore store(s.path());
  auto a = staged(store, "first");
  auto b = staged(store, "second");
  ASSERT_TRUE(store.publish(a, kKey, {{"status", "ok"}}));
  auto m = store.publish(b, kKey, {{"status", "ok"}});
  ASSERT_TRUE(m);
  EXPECT_EQ((*m)["files"]["kernel.so"]["sha256"], sha256_hex("first"));
  EXPECT_FALSE(fs::exists(b));
}

TEST(Store, NegativeEntriesExpire) {
  testing::Scratch s;
  DiskStore store(s.path());
  auto now = std::chrono::system_clock::now();
  store.set_clock([&] { return now; });
  ASSERT_TRUE(store.publish(staged(store, ""), kKey,
                            {{"status", "failed"}, {"expires_at", store.now_seconds() + 60}}));
  EXPECT_TRUE(store.lookup(kKey));
  now += std::chrono::seconds(61);
  EXPECT_FALSE(store.lookup(kKey));
  EXPECT_FALSE(fs::exists(store.entry_dir(kKey)));
}

TEST(Store, ClearStagingRemovesLeftovers) {
  testing::Scratch s;
  DiskStore store(s.path());
  staged(store, "half");
  staged(store, "written");
  EXPECT_EQ(store.clear_staging(), 2u);
  EXPECT_TRUE(staging_is_clear(store));
}

TEST(Store, RequestKeysPointAtKernelKeys) {
  testing::Scratch s;
  DiskStore store(s.path());
  const std::string rkey = sha256_hex("request");
  EXPECT_FALSE(store.lookup_request(rkey));
  ASSERT_TRUE(store.put_request(rkey, kKey));
  EXPECT_EQ(store.lookup_request(rkey), kKey);
}

TEST(Hash, KnownDigestAndKeyShape) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(is_hex_key(sha256_hex("x")));
  EXPECT_FALSE(is_hex_key("../../etc/passwd"));
  EXPECT_FALSE(is_hex_key(std::string(64, 'A')));
  EXPECT_FALSE(is_hex_key(std::string(63, 'a')));
}

}  // namespace
}  // namespace kforge::core
