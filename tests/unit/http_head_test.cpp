// api/http_head: the request-head parser's framing decisions, and the Range and
// If-None-Match readers, case by case (the fuzz targets check them on everything else).
#include <gtest/gtest.h>

#include <string>

#include "api/http_head.hpp"

namespace kforge::api {
namespace {

RequestHead parsed(std::string_view head, HeadError* error = nullptr) {
  RequestHead r;
  HeadError e;
  const bool ok = parse_request_head(head, r, e);
  if (error) *error = e;
  if (!ok) r.method = "(refused)";
  return r;
}

TEST(HttpHead, FramingIsOneOfNoneLengthOrChunked) {
  EXPECT_EQ(parsed("GET / HTTP/1.1\r\nHost: x").framing, RequestHead::Framing::kNone);
  auto post = parsed("POST /kernels HTTP/1.1\r\nHost: x\r\ncontent-length: 12");
  EXPECT_EQ(post.framing, RequestHead::Framing::kLength);
  EXPECT_EQ(post.content_length, 12u);
  EXPECT_EQ(parsed("POST /k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked").framing, RequestHead::Framing::kChunked);
  HeadError e;
  EXPECT_EQ(parsed("POST /k HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1", &e).method, "(refused)");
  EXPECT_NE(e.detail.find("more than one Content-Length"), std::string::npos);
  EXPECT_EQ(parsed("POST /k HTTP/1.1\r\nHost: x", &e).method, "(refused)");
  EXPECT_EQ(e.status, 411);
  EXPECT_EQ(parsed("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0").framing, RequestHead::Framing::kNone);
  EXPECT_EQ(parsed("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1", &e).method, "(refused)");
}

TEST(HttpHead, BodiesAreTakenAsJsonNeverMultipartOrEncoded) {
  HeadError e;
  EXPECT_EQ(parsed("POST /k HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Type: application/json").method, "POST");
  EXPECT_EQ(parsed("POST /k HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Type: text/plain").method, "POST");
  for (const char* type : {"multipart/form-data; boundary=b", "MULTIPART/form-data", "multipart%2Fform-data", "%6Dultipart/x"}) {
    EXPECT_EQ(parsed("POST /k HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Type: " + std::string(type), &e).method,
              "(refused)")
        << type;
    EXPECT_EQ(e.status, 415);
    EXPECT_NE(e.detail.find("Content-Type"), std::string::npos);
  }
  // The second Content-Type counts too (cpp-httplib reads the first, a proxy may read another).
  EXPECT_EQ(parsed("POST /k HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Type: a/b\r\nContent-Type: multipart/x").method,
            "(refused)");
  EXPECT_EQ(parsed("POST /k HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Encoding: gzip", &e).method, "(refused)");
  EXPECT_EQ(e.status, 415);
}

TEST(HttpHead, KeepAliveFollowsConnectionTokensAndVersion) {
  EXPECT_TRUE(parsed("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive").keep_alive);
  EXPECT_FALSE(parsed("GET / HTTP/1.1\r\nHost: x\r\nConnection: Keep-Alive, CLOSE").keep_alive);
  EXPECT_FALSE(parsed("GET / HTTP/1.1\r\nHost: x\r\nConnection: a\r\nConnection: close").keep_alive);
  EXPECT_FALSE(parsed("GET / HTTP/1.0\r\nConnection: keep-alive").keep_alive);
}

TEST(HttpHead, ScanRefusesWhatCannotBecomeAHead) {
  EXPECT_TRUE(scan_head("GET / HTTP/1.1\nHost: x\n\n", 1 << 16).error);
  EXPECT_TRUE(scan_head(std::string_view("\x16\x03\x01", 3), 1 << 16).error);
  EXPECT_TRUE(scan_head("SSH-2.0-OpenSSH\r\n", 1 << 16).error);
  const auto incomplete = scan_head("GET / HTTP/1.1\r\nHost:", 1 << 16);
  EXPECT_FALSE(incomplete.error);
  EXPECT_EQ(incomplete.size, 0u);
  const auto whole = scan_head("\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\nnext", 1 << 16);
  EXPECT_EQ(whole.skip, 4u);
  EXPECT_EQ(whole.size, 27u);  // "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
  EXPECT_EQ(scan_head("GET /" + std::string(9000, 'a'), 1 << 16).why.status, 414);
}

TEST(HttpHead, RangesOfOneByteRangeOrTheWhole) {
  using K = ByteRange::Kind;
  auto r = parse_range("bytes=0-9", 100);
  EXPECT_EQ(r.kind, K::kPart);
  EXPECT_EQ(r.first, 0u);
  EXPECT_EQ(r.last, 9u);
  r = parse_range("bytes=-10", 100);
  EXPECT_EQ(r.first, 90u);
  EXPECT_EQ(r.last, 99u);
  r = parse_range("bytes=95-500", 100);
  EXPECT_EQ(r.last, 99u);
  EXPECT_EQ(parse_range("bytes=100-", 100).kind, K::kUnsatisfiable);
  EXPECT_EQ(parse_range("bytes=-0", 100).kind, K::kUnsatisfiable);
  EXPECT_EQ(parse_range("bytes=1-2,4-5", 100).kind, K::kWhole);  // several: the whole file
  EXPECT_EQ(parse_range("items=1-2", 100).kind, K::kWhole);
  EXPECT_EQ(parse_range("bytes=5-1", 100).kind, K::kWhole);
  EXPECT_EQ(parse_range("bytes=-200", 100).first, 0u);
}

TEST(HttpHead, IfNoneMatchComparesWeaklyOverAList) {
  const std::string etag = "\"abc\"";
  EXPECT_TRUE(none_match("\"abc\"", etag));
  EXPECT_TRUE(none_match("W/\"abc\"", etag));
  EXPECT_TRUE(none_match("\"x\", \"abc\"", etag));
  EXPECT_TRUE(none_match(" * ", etag));
  EXPECT_FALSE(none_match("\"abcd\"", etag));
  EXPECT_FALSE(none_match("abc", etag));
  EXPECT_FALSE(none_match("", etag));
}

TEST(HttpHead, AQuerySplitsAtEveryAmpersandAndEachPairAtItsFirstEquals) {
  using Pairs = std::vector<std::pair<std::string_view, std::string_view>>;
  EXPECT_EQ(split_query("/cache/export?match=backend=cpu&since=2024-06-01"),
            (Pairs{{"match", "backend=cpu"}, {"since", "2024-06-01"}}));
  EXPECT_EQ(split_query("/jobs?&&limit=5&flag&=x&"), (Pairs{{"limit", "5"}, {"flag", ""}, {"", "x"}}));
  EXPECT_EQ(split_query("/jobs?"), Pairs{});
  EXPECT_EQ(split_query("/jobs"), Pairs{});
  EXPECT_EQ(split_query("/k?a=%3D&b=1?2"), (Pairs{{"a", "%3D"}, {"b", "1?2"}})) << "decoding is the caller's";
}

}  // namespace
}  // namespace kforge::api
