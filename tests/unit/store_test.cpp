#include "core/store.hpp"

#include <gtest/gtest.h>

#include <fstream>

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
