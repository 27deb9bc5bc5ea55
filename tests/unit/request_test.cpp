#include "core/request.hpp"

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
