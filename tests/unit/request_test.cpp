#include "core/request/request.hpp"
#include "core/base/utf8.hpp"

#include <gtest/gtest.h>

namespace kforge::core {
namespace {

using nlohmann::json;

Error parse_error(const json& j) {
  auto r = parse_kernel_request(j);
  EXPECT_FALSE(r);
  return r ? Error{} : r.error();
}

bool names_field(const Error& e, const std::string& field) {
  for (const auto& f : e.fields) {
    if (f.field == field) return true;
  }
  return false;
}

TEST(Request, ParsesSourceMode) {
  auto r = parse_kernel_request(json{{"backend", "rocm"},
                                     {"arch", {"gfx90a", "gfx1030"}},
                                     {"source", "x"},
                                     {"options", {{"opt_level", "O2"}, {"aot", true}}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->backend, Backend::kRocm);
  EXPECT_EQ(r->archs, (std::vector<std::string>{"gfx90a", "gfx1030"}));
  EXPECT_EQ(r->options.opt_level, "O2");
  EXPECT_TRUE(r->options.aot);
}

TEST(Request, ArchDefaultsToNative) {
  auto r = parse_kernel_request(json{{"backend", "cpu"}, {"source", "x"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->archs, std::vector<std::string>{"native"});
}

TEST(Request, EveryBadFieldIsNamed) {
  EXPECT_TRUE(names_field(parse_error(json{{"backend", "tpu"}, {"source", "x"}}), "/backend"));
  EXPECT_TRUE(names_field(parse_error(json{{"source", "x"}}), "/backend"));
  EXPECT_TRUE(names_field(parse_error(json{{"backend", "cpu"}}), "/source"));
  EXPECT_TRUE(names_field(parse_error(json{{"backend", "cpu"}, {"source", 3}}), "/source"));
  EXPECT_TRUE(
      names_field(parse_error(json{{"backend", "cpu"}, {"source", "x"}, {"arch", 7}}), "/arch"));
  EXPECT_TRUE(names_field(
      parse_error(json{{"backend", "cpu"}, {"source", "x"}, {"arch", {"a", 1}}}), "/arch/1"));
  EXPECT_TRUE(names_field(
      parse_error(json{{"backend", "cpu"}, {"source", "x"}, {"arch", json::array()}}), "/arch"));
  EXPECT_TRUE(names_field(
      parse_error(json{{"backend", "cpu"}, {"source", "x"}, {"options", {{"opt_level", "O9"}}}}),
      "/options/opt_level"));
  EXPECT_TRUE(names_field(
      parse_error(json{{"backend", "cpu"}, {"source", "x"}, {"options", {{"aot", "yes"}}}}),
      "/options/aot"));
}

// Inductor's ROCm compiles flush denormals by default (-fgpu-flush-denormals-to-zero): an option
// of the GPU backends, in the key only when asked (older requests keep their keys), and a 400 on
// cpu, whose g++ has no such flag.
TEST(Request, FlushDenormalsIsAGpuOption) {
  auto r = parse_kernel_request(json{{"backend", "rocm"}, {"source", "x"}, {"options", {{"flush_denormals", true}}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->options.flush_denormals);
  EXPECT_EQ(r->options.to_json()["flush_denormals"], true);
  EXPECT_FALSE(CompileOptions{}.to_json().contains("flush_denormals"));
  EXPECT_TRUE(names_field(parse_error(json{{"backend", "cpu"}, {"source", "x"}, {"options", {{"flush_denormals", true}}}}),
                          "/options/flush_denormals"));
  EXPECT_TRUE(parse_kernel_request(json{{"backend", "cpu"}, {"source", "x"}, {"options", {{"flush_denormals", false}}}}));
  EXPECT_TRUE(names_field(parse_error(json{{"backend", "cuda"}, {"source", "x"}, {"options", {{"flush_denormals", 1}}}}),
                          "/options/flush_denormals"));
}

TEST(Request, UnknownFieldsAreRejectedNotIgnored) {
  Error e = parse_error(json{{"backend", "cpu"}, {"source", "x"}, {"sorce", "y"}});
  EXPECT_TRUE(names_field(e, "/sorce"));
  Error flags = parse_error(
      json{{"backend", "cpu"}, {"source", "x"}, {"options", {{"flags", "-fplugin=x.so"}}}});
  EXPECT_TRUE(names_field(flags, "/options/flags"));
}

TEST(Request, SourceLimit) {
  RequestLimits limits;
  limits.max_source_bytes = 10;
  auto r = parse_kernel_request(json{{"backend", "cpu"}, {"source", std::string(11, 'x')}}, limits);
  ASSERT_FALSE(r);
  EXPECT_TRUE(names_field(r.error(), "/source"));
}

TEST(Request, JsonBodyErrors) {
  auto bad = parse_json_body("{\"backend\": ");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("invalid JSON"), std::string::npos);
  std::string deep(100, '[');
  deep += std::string(100, ']');
  auto too_deep = parse_json_body(deep, 32);
  ASSERT_FALSE(too_deep);
  EXPECT_NE(too_deep.error().message.find("deeper"), std::string::npos);
  EXPECT_TRUE(parse_json_body("{\"a\": [1, 2]}", 32));
  // A number nlohmann cannot hold is bad input too, not an exception (found by the fuzzer).
  auto overflow = parse_json_body("{\"a\": 888888888888888888888800428e3905207863}", 32);
  ASSERT_FALSE(overflow);
  EXPECT_NE(overflow.error().message.find("number overflow"), std::string::npos);
}

}  // namespace
}  // namespace kforge::core

// Issue 18: a size, stride or offset near the int64 edges must be refused, never wrap past
// the storage bound.
namespace kforge::core {
namespace {

TEST(Tensor, StorageIsCheckedAtTheInt64Edges) {
  const int64_t max = INT64_MAX;
  struct Case {
    json tensor;
    std::string field;
  };
  const std::vector<Case> cases = {
      {{{"name", "c"}, {"dtype", "float32"}, {"sizes", {4}}, {"offset", max}}, "/t/offset"},
      {{{"name", "c"}, {"dtype", "float32"}, {"sizes", {4}}, {"offset", max - 1}}, "/t/offset"},
      {{{"name", "c"}, {"dtype", "float32"}, {"sizes", {int64_t{1} << 31, 24}}, {"strides", {int64_t{1} << 33, 1}}},
       "/t/strides"},
      {{{"name", "c"}, {"dtype", "float32"}, {"sizes", {int64_t{1} << 31, int64_t{1} << 31}},
        {"strides", {int64_t{1} << 40, 1}}},
       "/t/strides"},
      {{{"name", "c"}, {"dtype", "float32"}, {"sizes", {4}}, {"offset", (int64_t{1} << 34)}}, "/t/offset"},
      // Contiguous by default: the implied strides overflow before any bound is checked.
      {{{"name", "c"}, {"dtype", "float32"},
        {"sizes", {int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31}}},
       "/t/sizes"},
  };
  for (const auto& c : cases) {
    auto t = parse_tensor(c.tensor, "/t", false);
    ASSERT_FALSE(t) << c.tensor.dump();
    EXPECT_EQ(t.error().fields.at(0).field, c.field) << c.tensor.dump() << ": " << t.error().message;
  }
  // Broadcast inputs may address few elements with many indices, but not 2^64 of them.
  auto b = parse_tensor({{"name", "b"}, {"dtype", "float32"}, {"sizes", {int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31}},
                         {"strides", {0, 0, 0}}},
                        "/b", true);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().fields.at(0).field, "/b/sizes");
  // The largest storage that fits is still accepted.
  auto ok = parse_tensor({{"name", "c"}, {"dtype", "float32"}, {"sizes", {1}}, {"offset", (int64_t{1} << 34) - 1}}, "/t", false);
  EXPECT_TRUE(ok) << (ok ? "" : ok.error().message);
}

TEST(Request, InvalidUtf8InABodyNamesTheField) {
  struct Case {
    std::string body;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"{\"backend\": \"cpu\", \"arch\": \"\xff\xfe\"}", "/arch"},
      {"{\"backend\": \"cpu\", \"template\": \"gemm\", \"inputs\": [{\"name\": \"a\"}, {\"name\": \"\xc3\"}]}", "/inputs/1/name"},
      {"{\"backend\": \"cpu\", \"params\": {\"\xed\xa0\x80\": 1}}", "/params"},  // a surrogate, in a key
      {"{\"source\": \"ok\", \"a/b~\": [\"\xf4\x90\x80\x80\"]}", "/a~1b~0/0"},        // past U+10FFFF
  };
  for (const auto& c : cases) {
    auto r = parse_json_body(c.body);
    ASSERT_FALSE(r) << c.field;
    EXPECT_EQ(r.error().fields.at(0).field, c.field);
    // The message must itself be dumpable (strict): no raw bytes are quoted back.
    EXPECT_NO_THROW((void)json(r.error().message).dump()) << c.field;
  }
}

TEST(Utf8, TailsAreCutOnCharacterBoundariesAndSanitized) {
  std::string text;
  for (int i = 0; i < 1500; ++i) text += "\xc3\xa9";  // 3000 bytes of é
  for (size_t cut : {size_t{1999}, size_t{2000}, size_t{1}}) {
    const std::string tail = utf8_tail(text, cut);
    EXPECT_TRUE(valid_utf8(tail)) << cut;
    EXPECT_LE(tail.size(), cut);
  }
  EXPECT_EQ(sanitize_utf8("a\xff" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(invalid_utf8_at("ok\xc0\x80"), 2u);  // overlong NUL
  EXPECT_TRUE(valid_utf8("\xf0\x9f\x98\x80"));
}

}  // namespace
}  // namespace kforge::core
