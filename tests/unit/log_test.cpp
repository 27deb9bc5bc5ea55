// core/base/log: what a record looks like in each format, what the level keeps out, and hostile
// values (quotes, newlines, bytes that are not UTF-8) that must not break a line.
#include "core/base/log.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace kforge::core::log {
namespace {

class Log : public ::testing::Test {
 protected:
  void TearDown() override { configure(Format::kJson, Level::kInfo); }
  // What the records made by `make` wrote to stderr, line by line.
  template <class F>
  std::vector<std::string> lines(Format format, Level min, F make) {
    configure(format, min);
    ::testing::internal::CaptureStderr();
    make();
    std::istringstream in(::testing::internal::GetCapturedStderr());
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
};

TEST_F(Log, AJsonRecordHasTimeLevelEventMessageAndFieldsInOrder) {
  auto out = lines(Format::kJson, Level::kInfo, [] {
    info("access").str("method", "POST").num("status", 200).fixed("ms", 0.41234, 3).num("bytes", uint64_t{12});
    warn("auth", "auth off").json("host", "0.0.0.0").json("tokens", nlohmann::json::array());
  });
  ASSERT_EQ(out.size(), 2u);
  auto j = nlohmann::json::parse(out[0]);
  EXPECT_TRUE(std::regex_match(j["ts"].get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")))
      << out[0];
  EXPECT_EQ(out[0].substr(out[0].find(",\"level\"")),
            R"(,"level":"info","event":"access","method":"POST","status":200,"ms":0.412,"bytes":12})");
  EXPECT_EQ(out[1].substr(out[1].find(",\"level\"")),
            R"(,"level":"warn","event":"auth","msg":"auth off","host":"0.0.0.0","tokens":[]})");
}

TEST_F(Log, ATextRecordPutsTheMessageFirstAndQuotesOnlyWhatNeedsIt) {
  auto out = lines(Format::kText, Level::kDebug, [] {
    info("access").str("path", "/kernels").str("client", "").str("agent", "curl 8.0").num("status", 200);
    error("fatal", "cannot use cache directory /x: Permission denied").str("dir", "/x");
    debug("job").str("q", "a\"b=c");
  });
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].substr(27), R"( info  access path=/kernels client="" agent="curl 8.0" status=200)");
  EXPECT_EQ(out[1].substr(27), " error cannot use cache directory /x: Permission denied dir=/x");
  EXPECT_EQ(out[2].substr(27), R"( debug job q="a\"b=c")");
}

TEST_F(Log, TheLevelKeepsLesserRecordsOut) {
  auto out = lines(Format::kJson, Level::kWarn, [] {
    info("access").str("path", "/");
    debug("job");
    warn("redis", "down");
    error("fatal", "no");
  });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NE(out[0].find("\"redis\""), std::string::npos);
  EXPECT_NE(out[1].find("\"fatal\""), std::string::npos);
  EXPECT_FALSE(enabled(Level::kInfo));
}

TEST_F(Log, HostileValuesStayOnOneLineAndValidUtf8) {
  const std::string hostile = std::string("a\nb\r\"c\\d\x01") + "\xff\xfe" + "\xe2\x82";  // a cut sequence last
  auto json = lines(Format::kJson, Level::kInfo, [&] { info("access", hostile).str("path", hostile); });
  ASSERT_EQ(json.size(), 1u);
  auto j = nlohmann::json::parse(json[0]);
  EXPECT_EQ(j["msg"], "a\nb\r\"c\\d\x01\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(j["path"], j["msg"]);
  auto text = lines(Format::kText, Level::kInfo, [&] { info("access", hostile).str("path", hostile); });
  ASSERT_EQ(text.size(), 1u);
  EXPECT_NE(text[0].find("a b \"c\\d "), std::string::npos) << text[0];  // control bytes as spaces
  EXPECT_NE(text[0].find(R"(path="a\nb\r\"c\\d\u0001)"), std::string::npos) << text[0];
}

TEST_F(Log, ARecordMadeWhileAnotherIsBuiltIsItsOwnLine) {
  auto value = [] {
    info("inner").str("k", "v");
    return std::string("outer-value");
  };
  auto out = lines(Format::kJson, Level::kInfo, [&] { info("outer").str("a", "1").str("b", value()); });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(out[0])["event"], "inner");
  EXPECT_EQ(nlohmann::json::parse(out[1])["b"], "outer-value");
}

TEST_F(Log, AsynchronousRecordsAreAllWrittenByTheStop) {
  auto out = lines(Format::kJson, Level::kInfo, [] {
    start_async();
    for (int i = 0; i < 1000; ++i) info("access").num("i", i);
    stop_async();
  });
  ASSERT_EQ(out.size(), 1000u);
  EXPECT_EQ(nlohmann::json::parse(out[999])["i"], 999);
}

}  // namespace
}  // namespace kforge::core::log
