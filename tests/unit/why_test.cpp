// Why did this miss: the unified diff, the named differences between two sets of key
// inputs, and the store's family index that finds the nearest entry.
#include "core/build/why.hpp"

#include <gtest/gtest.h>

#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"
#include "core/base/text_diff.hpp"
#include "unit/scratch.hpp"

namespace kforge::core {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string numbered(int from, int to, const std::string& replace_at = "", int at = -1) {
  std::string s;
  for (int i = from; i <= to; ++i) s += (i == at ? replace_at : "line " + std::to_string(i)) + "\n";
  return s;
}

TEST(TextDiff, EqualTextsHaveNoDiff) { EXPECT_EQ(unified_diff("a\nb\n", "a\nb\n", "x", "y"), ""); }

TEST(TextDiff, OneChangedLineWithThreeLinesOfContext) {
  EXPECT_EQ(unified_diff(numbered(1, 10), numbered(1, 10, "changed", 5), "a/s.cpp", "b/s.cpp"),
            "--- a/s.cpp\n+++ b/s.cpp\n"
            "@@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+changed\n line 6\n line 7\n line 8\n");
}

TEST(TextDiff, ChangesFarApartAreTwoHunksAndNearOnesOne) {
  std::string was = numbered(1, 30), now = was;
  now.replace(now.find("line 3\n"), 7, "three\n");
  now.replace(now.find("line 25\n"), 8, "");  // a deleted line
  const std::string d = unified_diff(was, now, "a", "b");
  EXPECT_NE(d.find("@@ -1,6 +1,6 @@\n line 1\n line 2\n-line 3\n+three\n"), std::string::npos) << d;
  EXPECT_NE(d.find("@@ -22,7 +22,6 @@\n line 22\n line 23\n line 24\n-line 25\n line 26\n"), std::string::npos) << d;
  // Two changes 6 lines apart share their context: one hunk.
  now = numbered(1, 20, "x", 5);
  now.replace(now.find("line 11\n"), 8, "y\n");
  const std::string one = unified_diff(numbered(1, 20), now, "a", "b");
  EXPECT_EQ(one.find("\n@@ ", one.find("\n@@ ") + 1), std::string::npos) << one;
}

TEST(TextDiff, InsertionsIntoAndDeletionFromEmptyTexts) {
  EXPECT_EQ(unified_diff("", "a\nb\n", "a", "b"), "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+a\n+b\n");
  EXPECT_EQ(unified_diff("a\n", "", "a", "b"), "--- a\n+++ b\n@@ -1 +0,0 @@\n-a\n");
}

TEST(TextDiff, AMissingFinalNewlineIsShownAsGnuDiffDoes) {
  EXPECT_EQ(unified_diff("a\nb\n", "a\nb", "a", "b"),
            "--- a\n+++ b\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n");
}

TEST(TextDiff, PastTheEditBudgetTheMiddleIsOneReplacedBlockAndStillCorrect) {
  std::string was, now;
  for (int i = 0; i < 50; ++i) was += "w" + std::to_string(i) + "\n", now += "n" + std::to_string(i) + "\n";
  DiffOptions o;
  o.max_edits = 10;
  const std::string d = unified_diff("head\n" + was + "tail\n", "head\n" + now + "tail\n", "a", "b", o);
  EXPECT_NE(d.find("@@ -1,52 +1,52 @@\n head\n-w0\n"), std::string::npos) << d.substr(0, 200);
  EXPECT_NE(d.find("-w49\n+n0\n"), std::string::npos);
  EXPECT_NE(d.find("+n49\n tail\n"), std::string::npos);
  o.max_bytes = 100;
  EXPECT_NE(unified_diff(was, now, "a", "b", o).find("cut at 100 bytes"), std::string::npos);
}

TEST(TextDiff, TheScriptIsMinimalForInterleavedEdits) {
  // a b c a b b a -> c b a b a c: the textbook example, 5 edits.
  auto lines = [](const std::string& s) {
    std::string out;
    for (char c : s) out += std::string(1, c) + "\n";
    return out;
  };
  const std::string d = unified_diff(lines("abcabba"), lines("cbabac"), "a", "b");
  int edits = 0;
  for (size_t at = d.find('\n', d.find("@@")); at != std::string::npos && at + 1 < d.size(); at = d.find('\n', at + 1))
    edits += d[at + 1] == '-' || d[at + 1] == '+';
  EXPECT_EQ(edits, 5) << d;
}

json inputs() {
  return {{"backend", "cpu"},
          {"arch", "x86-64-v3"},
          {"compiler", {{"version", "g++ 12.2.0"}, {"path", "/usr/bin/g++-12"}, {"identity", "aa"}}},
          {"flags", {"-std=c++17", "-O3", "-fPIC", "-shared", "source.cpp", "-o", "kernel.so"}},
          {"libraries", json::array()},
          {"source", "s1"},
          {"template", "gemm"},
          {"reference", false},
          {"params.mr", 6},
          {"params.nr", 16},
          {"inputs[0]", {{"dtype", "float32"}, {"sizes", {4, 4}}}},
          {"output", {{"dtype", "float32"}, {"sizes", {4, 4}}}},
          {"epilogue", json::array()},
          {"input_reorder", {0, 1}}};
}

TEST(WhyDifferences, NamesEachChangedInputWithWasAndNow) {
  json now = inputs();
  EXPECT_TRUE(input_differences(inputs(), now).empty());
  now["compiler"]["version"] = "g++ 12.3.0";
  now["compiler"]["identity"] = "bb";
  now["params.mr"] = 4;
  now["source"] = "s2";  // a template's source follows from its params: not named
  json d = input_differences(inputs(), now);
  ASSERT_EQ(d.size(), 2u) << d.dump(2);
  EXPECT_EQ(d[0], (json{{"input", "compiler"}, {"was", "g++ 12.2.0"}, {"now", "g++ 12.3.0"}}));
  EXPECT_EQ(d[1], (json{{"input", "params.mr"}, {"was", 6}, {"now", 4}}));
}

TEST(WhyDifferences, FlagsAreTheArgumentsOnlyOneSideHas) {
  json now = inputs();
  now["flags"] = {"-std=c++17", "-O2", "-fPIC", "-shared", "-ffast-math", "source.cpp", "-o", "kernel.so"};
  json d = input_differences(inputs(), now);
  ASSERT_EQ(d.size(), 1u) << d.dump(2);
  EXPECT_EQ(d[0]["was"], json::array({"-O3"}));
  EXPECT_EQ(d[0]["now"], json::array({"-O2", "-ffast-math"}));
}

TEST(WhyDifferences, AnotherBuildOfTheSameCompilerVersionSaysWhatElseDiffers) {
  json now = inputs();
  now["compiler"]["path"] = "/opt/gcc/bin/g++";
  now["compiler"]["identity"] = "cc";
  json d = input_differences(inputs(), now);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["now"], "/opt/gcc/bin/g++");
  EXPECT_NE(d[0].value("detail", "").find("path"), std::string::npos);
}

TEST(WhyDifferences, ATemplateSourceAloneIsNamedAndASourceKernelsAlways) {
  json now = inputs();
  now["source"] = "s2";
  json d = input_differences(inputs(), now);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["input"], "source");  // the template renders differently: kforge changed
  json was_src = inputs(), now_src = inputs();
  for (auto* j : {&was_src, &now_src}) {
    for (const char* k : {"template", "reference", "params.mr", "params.nr", "inputs[0]", "output", "epilogue", "input_reorder"})
      j->erase(k);
  }
  now_src["source"] = "s2";
  now_src["arch"] = "haswell";
  d = input_differences(was_src, now_src);
  ASSERT_EQ(d.size(), 2u) << d.dump(2);
  EXPECT_EQ(d[0]["input"], "arch");
  EXPECT_EQ(d[1]["input"], "source");
}

// Publishes an entry of `family` with `inputs` and `source` in `store`.
std::string publish(storage::DiskTier& store, const std::string& family, const json& in, const std::string& source,
                    const std::string& key) {
  auto dir = store.make_staging();
  EXPECT_TRUE(dir);
  const std::string name = "cpu_kernel_" + key.substr(0, 12);
  EXPECT_TRUE(write_file(*dir / "source.cpp", replace_identifier(source, "KERNEL_NAME", name)));
  EXPECT_TRUE(write_file(*dir / "kernel.so", "ELF" + key));
  auto m = store.publish(*dir, key,
                         {{"status", "ok"}, {"kernel_name", name}, {"source_file", "source.cpp"}, {"family", family},
                          {"inputs", in}});
  EXPECT_TRUE(m) << m.error().message;
  return key;
}

TEST(WhyNearest, TheFewestDifferencesWinThenTheSmallestSourceChange) {
  testing::Scratch s;
  storage::DiskTier store(s.path());
  const std::string family = sha256_hex("family").substr(0, 32);
  json base = inputs();
  for (const char* k : {"template", "reference", "params.mr", "params.nr", "inputs[0]", "output", "epilogue", "input_reorder"})
    base.erase(k);
  const std::string src = "int KERNEL_NAME() {\n  int a = 1;\n  int b = 2;\n  return a + b;\n}\n";
  json far = base;
  far["arch"] = "haswell";
  far["source"] = "far";
  publish(store, family, far, src, sha256_hex("far"));
  json close = base;
  close["source"] = "close";
  const std::string close_src = "int KERNEL_NAME() {\n  int a = 1;\n  int b = 3;\n  return a + b;\n}\n";
  const std::string close_key = publish(store, family, close, close_src, sha256_hex("close"));
  json farther_src = base;
  farther_src["source"] = "farther";
  publish(store, family, farther_src, "int KERNEL_NAME() {\n  return 7;\n}\n", sha256_hex("farther"));
  // Another family is never a neighbour, however alike.
  publish(store, sha256_hex("other").substr(0, 32), base, src, sha256_hex("other"));
  EXPECT_EQ(store.family_members(family, 10).size(), 3u);

  json now = base;
  now["source"] = "now";
  const std::string now_src = "int KERNEL_NAME() {\n  int a = 1;\n  int b = 4;\n  return a + b;\n}\n";
  json w = explain_miss(store, {sha256_hex("now"), family, now, now_src, "source.cpp"});
  EXPECT_EQ(w["nearest"]["key"], close_key) << w.dump(2);
  ASSERT_EQ(w["miss_reason"].size(), 1u) << w.dump(2);
  EXPECT_EQ(w["miss_reason"][0]["input"], "source");
  EXPECT_NE(w["miss_reason"][0]["diff"].get<std::string>().find("-  int b = 3;\n+  int b = 4;\n"), std::string::npos)
      << w["miss_reason"][0]["diff"];

  // Nothing in the family: the first build.
  w = explain_miss(store, {sha256_hex("x"), sha256_hex("empty").substr(0, 32), now, now_src, "source.cpp"});
  EXPECT_TRUE(w["nearest"].is_null());
  EXPECT_EQ(w["miss_reason"][0]["input"], "kernel");
}

TEST(WhyNearest, GcDropsTheLinksOfRemovedEntries) {
  testing::Scratch s;
  storage::DiskTier store(s.path());
  const std::string family = sha256_hex("family").substr(0, 32);
  const std::string key = publish(store, family, inputs(), "int KERNEL_NAME();\n", sha256_hex("k"));
  ASSERT_EQ(store.family_members(family, 10).size(), 1u);
  EXPECT_EQ(store.family_members(family, 10)[0].key, key);
  store.remove_entry(key);
  EXPECT_TRUE(store.family_members(family, 10).empty()) << "a removed entry is no member";
  EXPECT_EQ(store.collect_garbage().dangling_family_links, 1u);
  EXPECT_EQ(store.collect_garbage().dangling_family_links, 0u);
}

}  // namespace
}  // namespace kforge::core
