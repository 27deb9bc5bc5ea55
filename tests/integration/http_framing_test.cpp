// Request framing on the plain-HTTP port (issue 41, docs/SECURITY.md "Request framing"): a
// request head kforge cannot parse, or whose framing is ambiguous, is answered once with a
// 400 and `Connection: close`, and nothing after it is read as a request — whether the bad
// head is the first on its connection or follows a request answered on an event loop (a
// hit) or by a worker (everything else). Each case carries a smuggled `GET /healthz` where a
// desynchronised reader would find it; its 200 must never come. `Connection: close` from the
// client is honoured on every answer, however it is spelled.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "integration/framing_cases.hpp"
#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

using nlohmann::json;

const std::string kSmuggled = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
using Case = FramingCase;
std::vector<Case> framing_cases() { return kforge::testing::framing_cases(kSmuggled); }

class HttpFraming : public ::testing::Test {
 protected:
  void SetUp() override { server_ = std::make_unique<ServerProcess>(scratch_ / "cache", scratch_ / "server.log"); }

  // A kernel in the cache, and the body of its request: POSTing it again is a hit
  // answered on an event loop.
  std::string cached_request() {
    const std::string body = hit_request().dump();
    auto r = post_json(*server_, "/kernels", body);
    EXPECT_EQ(r.status, 200) << r.raw;
    return body;
  }

  // Sends `prefix` (valid requests, `answers` of them) then `bad` on one connection: the
  // valid ones are answered, then exactly one 400 with `Connection: close`, then the
  // connection ends with nothing more.
  void expect_refused(const std::string& what, const std::string& prefix, int answers, const Case& bad,
                      int status = 400) {
    RawConnection c(*server_);
    ASSERT_TRUE(c.connected());
    c.send(prefix + bad.bytes);
    for (int i = 0; i < answers; ++i) {
      auto a = c.read_answer();
      EXPECT_EQ(a.status, 200) << what << " / " << bad.name << ": the valid request before it\n" << a.head;
    }
    auto a = c.read_answer();
    EXPECT_EQ(a.status, status) << what << " / " << bad.name << "\n" << a.head << a.body;
    EXPECT_NE(a.head.find("\r\nConnection: close\r\n"), std::string::npos) << what << " / " << bad.name << "\n" << a.head;
    EXPECT_EQ(a.head.find("Keep-Alive"), std::string::npos) << what << " / " << bad.name << "\n" << a.head;
    if (status == 400) EXPECT_EQ(json::parse(a.body, nullptr, false).value("status", 0), 400) << a.body;
    EXPECT_TRUE(c.closed_within(5)) << what << " / " << bad.name << ": the connection stayed open";
    EXPECT_EQ(c.unread(), "") << what << " / " << bad.name << ": a second answer came";
  }

  Scratch scratch_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(HttpFraming, AnAmbiguousHeadIsOne400ThenTheConnectionCloses) {
  for (const Case& bad : framing_cases()) expect_refused("first on its connection", "", 0, bad);
  EXPECT_GE(metric(*server_, "kforge_http_bad_requests_total"), double(framing_cases().size()));
  EXPECT_EQ(get(*server_, "/healthz").status, 200);
}

TEST_F(HttpFraming, AfterAHitAnsweredOnTheLoopToo) {
  const std::string body = cached_request();
  const std::string hit = "POST /kernels HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  const double loop_before = metric(*server_, "kforge_http_loop_answers_total");
  for (const Case& bad : framing_cases()) expect_refused("after a loop answer", hit, 1, bad);
  EXPECT_GE(metric(*server_, "kforge_http_loop_answers_total") - loop_before, double(framing_cases().size()))
      << "the valid request must have been answered on the loop";
}

TEST_F(HttpFraming, AfterARequestServedByAWorkerToo) {
  const std::string worker = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const Case& bad : framing_cases()) expect_refused("after a worker answer", worker, 1, bad);
}

TEST_F(HttpFraming, AnOverlongRequestLineIs414AndCloses) {
  const Case longline{"request line over 8 KiB", "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n" + kSmuggled};
  expect_refused("first", "", 0, longline, 414);
  expect_refused("after a worker answer", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 1, longline, 414);
}

// A head refused before it is complete: bytes that cannot start a head are answered at
// once, not after the head timeout.
TEST_F(HttpFraming, BytesThatAreNotHttpAreRefusedAtOnce) {
  for (const std::string bytes : {std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11),  // a TLS hello
                                  std::string("SSH-2.0-OpenSSH_9.2\r\n"), std::string("\0\0\0\0", 4)}) {
    RawConnection c(*server_);
    c.send(bytes);
    auto a = c.read_answer(false, 5);
    EXPECT_EQ(a.status, 400) << a.head;
    EXPECT_TRUE(c.closed_within(5));
  }
}

// `Connection: close`, however spelled, ends the connection after its answer: on the loop,
// on a worker, for a problem answer, and for HTTP/1.0.
TEST_F(HttpFraming, ConnectionCloseIsHonouredOnEveryAnswer) {
  const std::string body = cached_request();
  const std::vector<std::pair<std::string, int>> requests = {
      {"POST /kernels HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body, 200},
      {"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n", 200},
      {"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n", 200},
      {"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: CLOSE\r\n\r\n", 404},
      {"POST /kernels HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\n{\"a\":", 400},
      {"GET /healthz HTTP/1.0\r\n\r\n", 200},
  };
  for (const auto& [request, status] : requests) {
    RawConnection c(*server_);
    c.send(request + kSmuggled);
    auto a = c.read_answer();
    EXPECT_EQ(a.status, status) << request.substr(0, 60) << "\n" << a.head;
    EXPECT_NE(a.head.find("\r\nConnection: close\r\n"), std::string::npos) << request.substr(0, 60) << "\n" << a.head;
    EXPECT_EQ(a.head.find("Keep-Alive"), std::string::npos) << a.head;
    EXPECT_TRUE(c.closed_within(5)) << request.substr(0, 60);
    EXPECT_EQ(c.unread(), "") << request.substr(0, 60) << ": the smuggled request was answered";
  }
}

// What is valid stays valid: pipelined requests, leading empty lines, a chunked body (whose
// end only cpp-httplib sees: its answer closes the connection, and says so).
TEST_F(HttpFraming, ValidFramingIsStillServed) {
  const std::string body = cached_request();
  RawConnection c(*server_);
  std::string chunked = "POST /render HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", body.size());
  chunked += size + body + "\r\n0\r\n\r\n";
  c.send("\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\nPOST /kernels HTTP/1.1\r\nhost: x\r\ncontent-length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + chunked + kSmuggled);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.read_answer().status, 200) << "answer " << i;
  auto a = c.read_answer();
  EXPECT_EQ(a.status, 200) << a.head << a.body;
  EXPECT_NE(a.head.find("\r\nConnection: close\r\n"), std::string::npos) << a.head;
  EXPECT_TRUE(c.closed_within(5));
  EXPECT_EQ(c.unread(), "");
}

// Methods without a route are answered by the front: 405 naming what the path takes, 404
// for a path nobody serves; a POST without a length is 411, a coded body 415.
TEST_F(HttpFraming, OtherMethodsLengthAndCodingAreAnsweredByTheFront) {
  struct Expect {
    std::string request;
    int status;
    std::string allow;
  };
  const std::vector<Expect> cases = {
      {"DELETE /kernels/" + std::string(64, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 405, "GET, HEAD"},
      {"PUT /kernels HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 405, "GET, HEAD, POST"},
      {"PUT /render HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 405, "POST"},
      {"OPTIONS /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 405, "GET, HEAD"},
      {"DELETE /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 404, ""},
      {"POST /kernels HTTP/1.1\r\nHost: x\r\n\r\n", 411, ""},
      {"POST /kernels HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}", 415, ""},
      // cpp-httplib stops reading a multipart body it cannot parse (found by the http_head fuzzer).
      {"POST /kernels HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 9\r\n\r\n--a\r\nxxxx",
       415, ""},
      {"POST /kernels HTTP/1.1\r\nHost: x\r\nContent-Type: Multipart/Mixed\r\nContent-Length: 2\r\n\r\n{}", 415, ""},
      {"POST /kernels HTTP/1.1\r\nHost: x\r\nContent-Type: multipart%2Fform-data\r\nContent-Length: 2\r\n\r\n{}", 415, ""},
  };
  for (const auto& e : cases) {
    RawConnection c(*server_);
    c.send(e.request + kSmuggled);
    auto a = c.read_answer();
    EXPECT_EQ(a.status, e.status) << e.request.substr(0, 40) << "\n" << a.head;
    if (!e.allow.empty()) EXPECT_NE(a.head.find("\r\nAllow: " + e.allow + "\r\n"), std::string::npos) << a.head;
    EXPECT_TRUE(c.closed_within(5));
    EXPECT_EQ(c.unread(), "") << e.request.substr(0, 40);
  }
}

}  // namespace
}  // namespace kforge::testing
