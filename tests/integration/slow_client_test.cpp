// Slow clients (issue 45, docs/SECURITY.md "Slow clients"): one address opens more
// connections than --max-connections-per-client and drips bytes into heads and bodies
// (Slowloris). The connections over the cap are refused at once; every dripping one is
// answered 408 and closed within its deadline however steadily it drips; and another
// client's /healthz and POST hit answer in under 100 ms throughout. The counters in
// /metrics show each kind of drop.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kCap = 24;              // --max-connections-per-client
constexpr int kHeaderTimeoutS = 2;    // --header-timeout
constexpr int kBodyTimeoutS = 2;      // --body-timeout
constexpr int kMinBodyRate = 1 << 20;  // --min-body-rate: a 2 MiB body has 2 s more
constexpr const char* kAttacker = "127.0.0.2";

enum class Drip { kHead, kSmallBody, kLargeBody };

struct Dripper {
  std::unique_ptr<RawConnection> conn;
  Drip kind;
  Clock::time_point opened;
  double deadline_s;  // when the server must have answered 408 and closed, after `opened`
  bool closed = false;
  double closed_after_s = 0;
  int status = 0;
};

TEST(SlowClients, DrippedHeadsAndBodiesAreCutAtTheirDeadlinesAndOthersAreServed) {
  Scratch scratch;
  ServerProcess server(scratch / "cache", scratch / "server.log",
                       {"--header-timeout", std::to_string(kHeaderTimeoutS), "--body-timeout", std::to_string(kBodyTimeoutS),
                        "--min-body-rate", std::to_string(kMinBodyRate), "--max-connections-per-client",
                        std::to_string(kCap), "--read-timeout", "60", "--max-body", std::to_string(8 << 20)});
  // Another client's hit: a kernel built before the flood.
  const std::string body = hit_request().dump();
  ASSERT_EQ(post_json(server, "/kernels", body).status, 200);

  // The flood: 1.5x the cap from one address. Heads that never end; small bodies (read on
  // the event loop) and a large one (2 MiB: read by a worker) that trickle.
  std::vector<Dripper> drippers;
  int refused = 0;
  for (int i = 0; i < kCap * 3 / 2; ++i) {
    auto c = std::make_unique<RawConnection>(server, kAttacker);
    ASSERT_TRUE(c->connected());
    // The server refuses over the cap at once: a 503, then the end.
    if (i >= kCap) {
      auto a = c->read_answer(false, 5);
      EXPECT_EQ(a.status, 503) << "connection " << i << " over the cap of " << kCap;
      EXPECT_TRUE(c->closed_within(5));
      ++refused;
      continue;
    }
    const Drip kind = i % 3 == 0 ? Drip::kHead : i % 3 == 1 ? Drip::kSmallBody : Drip::kLargeBody;
    std::string start = "POST /kernels HTTP/1.1\r\nHost: x\r\n";
    double deadline = kHeaderTimeoutS;
    if (kind == Drip::kSmallBody) {
      start += "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{";
      deadline = kBodyTimeoutS + 1000.0 / kMinBodyRate;
    } else if (kind == Drip::kLargeBody) {
      start += "Content-Type: application/json\r\nContent-Length: " + std::to_string(2 << 20) + "\r\n\r\n{";
      deadline = kBodyTimeoutS + 2.0;
    }
    c->send(start);
    drippers.push_back({std::move(c), kind, Clock::now(), deadline});
  }
  ASSERT_EQ(refused, kCap / 2);

  // Drip a byte into each every 200 ms, and meanwhile be another client.
  const auto t0 = Clock::now();
  double worst_health_ms = 0, worst_hit_ms = 0;
  int probes = 0;
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  while (Clock::now() - t0 < std::chrono::seconds(kBodyTimeoutS + 2 + 3)) {
    for (auto& d : drippers) {
      if (d.closed) continue;
      if (!d.conn->drain_closed()) d.conn->send(d.kind == Drip::kHead ? "X-Drip: a\r\n" : " ");
      if (d.conn->drain_closed()) {
        d.closed = true;
        d.closed_after_s = std::chrono::duration<double>(Clock::now() - d.opened).count();
        std::string rest = d.conn->unread();
        if (rest.starts_with("HTTP/1.1 ")) d.status = std::stoi(rest.substr(9, 3));
      }
    }
    auto a = Clock::now();
    EXPECT_EQ(get(server, "/healthz").status, 200);
    worst_health_ms = std::max(worst_health_ms, ms(Clock::now() - a));
    a = Clock::now();
    EXPECT_EQ(post_json(server, "/kernels", body).status, 200);
    worst_hit_ms = std::max(worst_hit_ms, ms(Clock::now() - a));
    ++probes;
    std::this_thread::sleep_for(milliseconds(200));  // the drip's pace, not a wait for a clock
  }

  // Each one was cut at its deadline (the sweep runs each second: one more), with a 408.
  for (size_t i = 0; i < drippers.size(); ++i) {
    const auto& d = drippers[i];
    EXPECT_TRUE(d.closed) << "dripper " << i << " still open after " << ms(Clock::now() - d.opened) << " ms";
    EXPECT_LE(d.closed_after_s, d.deadline_s + 1.5) << "dripper " << i << " (kind " << int(d.kind) << ")";
    EXPECT_GE(d.closed_after_s, d.deadline_s - 0.5) << "dripper " << i << " was cut before its deadline";
    EXPECT_EQ(d.status, 408) << "dripper " << i << " (kind " << int(d.kind) << ")";
  }
  EXPECT_LT(worst_health_ms, 100) << "over " << probes << " probes";
  EXPECT_LT(worst_hit_ms, 100) << "over " << probes << " probes";

  const int heads = (kCap + 2) / 3, bodies = kCap - heads;
  EXPECT_EQ(metric(server, "kforge_http_connections_refused_total{cap=\"per_client\"}"), kCap / 2);
  EXPECT_EQ(metric(server, "kforge_http_request_timeouts_total{part=\"head\"}"), heads);
  EXPECT_EQ(metric(server, "kforge_http_request_timeouts_total{part=\"body\"}"), bodies);
  // The address is free again: its connections were all closed and counted out.
  RawConnection again(server, kAttacker);
  again.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(again.read_answer().status, 200);
}

}  // namespace
}  // namespace kforge::testing
