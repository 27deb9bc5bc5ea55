// The cluster (issue 13): redis-server on a free loopback port, three `kforge serve
// --redis` instances, nginx in front with the repo's docker/nginx/kforge-locations.conf; all
// started by the test and stopped after. Real Redis, real nginx, real compilers.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <signal.h>

#include <atomic>
#include <iostream>
#include <mutex>
#include <set>
#include <fstream>
#include <future>
#include <thread>

#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"
#include "core/process/process.hpp"
#include "integration/framing_cases.hpp"
#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// y[i] = factor * x[i]; a different factor is a different kernel.
std::string scale_request(int factor, const std::string& extra = "") {
  return json{{"backend", "cpu"},
              {"arch", "x86-64"},
              {"source", "#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\n" +
                             extra + "extern \"C\" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, "
                             "size_t* workspace_size, uint8_t* workspace, void* stream) {\n"
                             "  if (workspace_size) { *workspace_size = 0; return 0; }\n"
                             "  for (int64_t i = 0; i < n; ++i) y[i] = " + std::to_string(factor) + " * x[i];\n  return 0;\n}\n"}}
      .dump();
}

// A kernel whose compile keeps g++ busy for a few seconds (its constant evaluator).
std::string slow_request(int factor) {
  return scale_request(factor,
                       "constexpr unsigned long long burn(unsigned long long x) {\n"
                       "  for (int i = 0; i < 28; ++i) for (int j = 0; j < 50000; ++j) x = x * 6364136223846793005ull + 1;\n"
                       "  return x;\n}\nstatic_assert(burn(" + std::to_string(factor) + ") != 0);\n");
}

class Cluster : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* tool : {"redis-server", "nginx"}) {
      if (core::find_program(tool, "/usr/sbin:/usr/bin:/sbin:/bin").empty())
        GTEST_FAIL() << tool << " is not installed (scripts/setup.sh installs it)";
    }
    start_redis();
    for (const char* id : {"a", "b", "c"}) start_instance(id);
    start_nginx();
  }

  void start_redis() {  // on the port of the last one, if there was one: the instances know it
    if (!redis_port_) redis_port_ = free_port();
    redis_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{core::find_program("redis-server", "/usr/sbin:/usr/bin").string(), "--port",
                                 std::to_string(redis_port_), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"},
        scratch_ / "redis.log");
    ASSERT_TRUE(wait_for_port(redis_port_)) << "redis-server did not start";
  }

  void start_instance(const std::string& id, const std::string& lease_ttl = "3") {
    servers_[id] = std::make_unique<ServerProcess>(
        scratch_ / ("cache-" + id), scratch_ / ("server-" + id + ".log"),
        std::vector<std::string>{"--redis", "redis://127.0.0.1:" + std::to_string(redis_port_), "--instance-id", id,
                                 "--redis-lease-ttl", lease_ttl, "--compile-jobs", "2"});
  }

  void start_nginx() {
    nginx_port_ = free_port();
    fs::create_directories(scratch_ / "nginx" / "tmp");
    auto port_of = [](const ServerProcess& s) { return s.url().substr(s.url().rfind(':') + 1); };
    std::ofstream conf(scratch_ / "nginx" / "nginx.conf");
    if (::geteuid() == 0) conf << "user root root;\n";
    conf << "worker_processes 2;\nerror_log " << (scratch_ / "nginx" / "error.log").string() << ";\n"
         << "pid " << (scratch_ / "nginx" / "nginx.pid").string() << ";\nevents { worker_connections 1024; }\n"
         << "http {\n  access_log off;\n"
         << "  client_body_temp_path " << (scratch_ / "nginx" / "tmp").string() << ";\n"
         << "  proxy_temp_path " << (scratch_ / "nginx" / "tmp").string() << ";\n"
         << "  upstream kforge {\n";
    for (const auto& [id, s] : servers_) conf << "    server 127.0.0.1:" << port_of(*s) << " max_fails=2 fail_timeout=5s;\n";
    conf << "    keepalive 16;\n  }\n";
    for (const auto& [id, s] : servers_) conf << "  upstream kforge_" << id << " { server 127.0.0.1:" << port_of(*s) << "; }\n";
    conf << "  server {\n    listen 127.0.0.1:" << nginx_port_ << ";\n    include "
         << fs::absolute(fs::path(KFORGE_SOURCE_DIR) / "docker" / "nginx" / "kforge-locations.conf").string()
         << ";\n  }\n}\n";
    conf.close();
    nginx_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{core::find_program("nginx", "/usr/sbin:/usr/bin").string(), "-p",
                                 (scratch_ / "nginx").string(), "-c", (scratch_ / "nginx" / "nginx.conf").string(),
                                 "-g", "daemon off;"},
        scratch_ / "nginx" / "stdout.log");
    ASSERT_TRUE(wait_for_port(nginx_port_)) << "nginx did not start; see " << (scratch_ / "nginx" / "error.log");
  }

  httplib::Client via_nginx() const {
    httplib::Client c("127.0.0.1", nginx_port_);
    c.set_read_timeout(600);
    return c;
  }

  double runs(const std::string& id) { return metric(*servers_[id], "kforge_compiler_runs_total"); }
  double cluster_runs() {
    double n = 0;
    for (const auto& [id, s] : servers_) n += s->alive() ? runs(id) : 0;
    return n;
  }

  // One command on the test's Redis (binary-safe).
  json redis(const std::vector<std::string>& argv, std::string* bulk = nullptr) {
    redisContext* c = redisConnect("127.0.0.1", redis_port_);
    EXPECT_TRUE(c && !c->err);
    std::vector<const char*> p;
    std::vector<size_t> n;
    for (const auto& a : argv) {
      p.push_back(a.data());
      n.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), p.data(), n.data()));
    json out;
    if (r && r->type == REDIS_REPLY_STRING) {
      if (bulk) *bulk = std::string(r->str, r->len);
      out = "string";
    } else if (r && r->type == REDIS_REPLY_INTEGER) {
      out = r->integer;
    } else if (r && r->type == REDIS_REPLY_ARRAY) {
      out = json::array();
      for (size_t i = 0; i < r->elements; ++i)
        out.push_back(r->element[i]->type == REDIS_REPLY_STRING ? json(std::string(r->element[i]->str, r->element[i]->len))
                                                                : json(r->element[i]->integer));
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    return out;
  }

  // The artifact of `answer` runs and computes factor * x.
  void expect_scales(const ServerProcess& s, const Reply& answer, int factor) {
    ASSERT_EQ(answer.status, 200) << answer.raw;
    auto so = get(s, answer.body["artifact"]["url"]);
    ASSERT_EQ(so.status, 200);
    EXPECT_EQ(core::sha256_hex(so.raw), answer.body["artifact"]["sha256"]);
    fs::path p = scratch_ / (answer.body["key"].get<std::string>() + ".so");
    ASSERT_TRUE(core::write_file(p, so.raw));
    void* h = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr) << ::dlerror();
    using Fn = int (*)(const float*, float*, int64_t, size_t*, uint8_t*, void*);
    auto fn = reinterpret_cast<Fn>(::dlsym(h, answer.body["kernel_name"].get<std::string>().c_str()));
    ASSERT_NE(fn, nullptr);
    float x[3] = {1, 2, 3}, y[3] = {};
    EXPECT_EQ(fn(x, y, 3, nullptr, nullptr, nullptr), 0);
    EXPECT_EQ(y[2], 3.f * factor);
    ::dlclose(h);
  }

  Scratch scratch_;
  int redis_port_ = 0, nginx_port_ = 0;
  std::unique_ptr<ChildProcess> redis_, nginx_;
  std::map<std::string, std::unique_ptr<ServerProcess>> servers_;
};

TEST_F(Cluster, AKernelBuiltOnOneInstanceIsAHitOnTheOthers) {
  auto a = post_json(*servers_["a"], "/kernels", scale_request(3));
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.body["cache"], "miss");
  // Its URLs answer on any instance (nginx may send the download elsewhere): b has never
  // been asked for it, and copies it in from the shared tier.
  auto download = get(*servers_["b"], a.body["artifact"]["url"].get<std::string>());
  ASSERT_EQ(download.status, 200) << download.raw.substr(0, 300);
  EXPECT_EQ(core::sha256_hex(download.raw), a.body["artifact"]["sha256"]);
  for (const char* id : {"b", "c"}) {
    auto r = post_json(*servers_[id], "/kernels", scale_request(3));
    EXPECT_EQ(r.body["cache"], "hit") << id << ": " << r.raw;
    EXPECT_EQ(r.body["key"], a.body["key"]);
    EXPECT_EQ(r.body["artifact"]["sha256"], a.body["artifact"]["sha256"]);
    EXPECT_EQ(runs(id), 0) << id;
    expect_scales(*servers_[id], r, 3);
  }
  // Which instance built it, and every instance in the registry.
  auto m = get(*servers_["c"], "/kernels/" + a.body["key"].get<std::string>());
  auto status = get(*servers_["b"], "/status");
  ASSERT_TRUE(status.body["cluster"].is_object()) << status.raw;
  EXPECT_TRUE(status.body["cluster"]["shared_tier"]["up"].get<bool>());
  std::set<std::string> ids;
  for (const auto& i : status.body["cluster"]["instances"]) ids.insert(i["id"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{"a", "b", "c"}));
  EXPECT_EQ(get(*servers_["b"], "/readyz").body["status"], "ok");
}

TEST_F(Cluster, AnAutotuneRankingIsSharedWithInstancesOfTheSameDevice) {
  json req = {{"backend", "cpu"},
              {"arch", "x86-64"},
              {"template", "gemm"},
              {"inputs", {{{"name", "A"}, {"dtype", "float32"}, {"sizes", {64, 48}}}, {{"name", "B"}, {"dtype", "float32"}, {"sizes", {48, 32}}}}},
              {"output", {{"name", "C"}, {"dtype", "float32"}, {"sizes", {64, 32}}}},
              {"choices", {{{"mr", 4}}, {{"mr", 2}}}},
              {"benchmark", {{"budget_ms", 5}}}};
  auto a = post_json(*servers_["a"], "/autotune", req.dump());
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.body["cache"], "miss");
  auto b = post_json(*servers_["b"], "/autotune", req.dump());
  ASSERT_EQ(b.status, 200) << b.raw;
  EXPECT_EQ(b.body["cache"], "hit");
  EXPECT_EQ(b.body["winner"]["key"], a.body["winner"]["key"]);
  EXPECT_EQ(metric(*servers_["b"], "kforge_benchmark_runs_total"), 0);
  EXPECT_EQ(runs("b"), 0);
}

TEST_F(Cluster, IdenticalColdRequestsAcrossInstancesCostOneCompile) {
  const std::string body = slow_request(5);
  std::vector<std::future<Reply>> answers;
  const char* ids[] = {"a", "b", "c"};
  for (int i = 0; i < 32; ++i) {
    answers.push_back(std::async(std::launch::async, [&, i] { return post_json(*servers_[ids[i % 3]], "/kernels", body); }));
  }
  std::map<std::string, int> outcomes;
  std::set<std::string> shas;
  for (auto& f : answers) {
    Reply r = f.get();
    ASSERT_EQ(r.status, 200) << r.raw;
    outcomes[r.body["cache"]]++;
    shas.insert(r.body["artifact"]["sha256"]);
  }
  EXPECT_EQ(cluster_runs(), 1) << "one compiler run in the whole cluster";
  EXPECT_EQ(outcomes["miss"], 1);
  EXPECT_EQ(shas.size(), 1u);
}

TEST_F(Cluster, AnInstanceKilledMidBuildIsTakenOverByAnother) {
  // a starts the build and dies with its lease held; b waits for the lease to expire (3 s),
  // takes the build over and answers with a working artifact.
  auto c = servers_["a"]->client();
  auto started = c.Post("/kernels", {{"Prefer", "respond-async"}}, slow_request(7), "application/json");
  ASSERT_TRUE(started);
  ASSERT_EQ(started->status, 202) << started->body;
  for (int i = 0; i < 100 && redis({"KEYS", "kforge:v1:lease:*"}).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(redis({"KEYS", "kforge:v1:lease:*"}).size(), 1u) << "a holds the build lease";
  servers_["a"]->kill9();
  auto b = post_json(*servers_["b"], "/kernels", slow_request(7));
  expect_scales(*servers_["b"], b, 7);
  EXPECT_EQ(b.body["cache"], "miss");
  auto c_answer = post_json(*servers_["c"], "/kernels", slow_request(7));
  EXPECT_EQ(c_answer.body["cache"], "hit");
  EXPECT_EQ(runs("c"), 0);
  // nginx takes the dead instance out and keeps answering.
  auto via = via_nginx().Post("/kernels", slow_request(7), "application/json");
  ASSERT_TRUE(via);
  EXPECT_EQ(via->status, 200);
}

TEST_F(Cluster, RedisDownMidRunDegradesToLocalAndComesBack) {
  ASSERT_EQ(post_json(*servers_["a"], "/kernels", scale_request(11)).status, 200);
  redis_->kill(SIGKILL);
  // Every request still answers: from the local tier, or compiled locally.
  for (const char* id : {"a", "b", "c"}) {
    for (int f : {11, 12}) {
      auto r = post_json(*servers_[id], "/kernels", scale_request(f));
      EXPECT_EQ(r.status, 200) << id << " " << f << ": " << r.raw;
    }
  }
  auto ready = get(*servers_["b"], "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body["status"], "degraded");
  EXPECT_GE(metric(*servers_["b"], "kforge_shared_tier_total{event=\"error\"}"), 1);
  auto via = via_nginx().Post("/kernels", scale_request(13), "application/json");
  ASSERT_TRUE(via);
  EXPECT_EQ(via->status, 200) << via->body;

  // Redis back, empty: only misses, nothing wrong served; the instances reconnect.
  start_redis();
  // Each instance reconnects once its backoff (at most 5 s) ends: /readyz probes Redis.
  for (const char* id : {"a", "c"}) {
    bool up = false;
    for (int i = 0; i < 100 && !up; ++i) {
      up = get(*servers_[id], "/readyz").body["checks"].value("shared_tier", false);
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(up) << "instance " << id << " did not reconnect to Redis";
  }
  auto r = post_json(*servers_["c"], "/kernels", scale_request(14));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(get(*servers_["c"], "/readyz").body["status"], "ok");
  auto hit = post_json(*servers_["a"], "/kernels", scale_request(14));
  EXPECT_EQ(hit.body["cache"], "hit") << "shared again after the restart";
  expect_scales(*servers_["a"], hit, 14);
}

TEST_F(Cluster, ACorruptBlobInRedisIsNeverServed) {
  auto b = post_json(*servers_["b"], "/kernels", scale_request(17));
  ASSERT_EQ(b.status, 200);
  const std::string blob = "kforge:v1:blob:" + b.body["artifact"]["sha256"].get<std::string>();
  std::string bytes;
  ASSERT_EQ(redis({"GET", blob}, &bytes), "string");
  bytes[bytes.size() / 2] ^= 0x01;  // one bit of the .so
  redis({"SET", blob, bytes});
  auto c = post_json(*servers_["c"], "/kernels", scale_request(17));
  expect_scales(*servers_["c"], c, 17);  // built locally again, not the corrupt copy
  EXPECT_EQ(c.body["cache"], "miss");
  EXPECT_EQ(metric(*servers_["c"], "kforge_shared_tier_total{event=\"corrupt\"}"), 1);
  EXPECT_EQ(redis({"EXISTS", blob}), 1) << "re-shared by c after the corrupt copy was dropped";
  std::string now;
  redis({"GET", blob}, &now);
  EXPECT_EQ(core::sha256_hex(now), b.body["artifact"]["sha256"]);
}

TEST_F(Cluster, AsyncJobsAndTheirEventsWorkThroughNginx) {
  auto c = via_nginx();
  auto r = c.Post("/kernels", {{"Prefer", "respond-async"}}, slow_request(19), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 202) << r->body;
  const std::string location = r->get_header_value("Location");
  ASSERT_TRUE(location.starts_with("/jobs/j")) << location;
  // Wherever nginx sent the POST, the job's follow-ups reach the instance that holds it.
  // Followed as EventSource does: a stream that ends early is reconnected (see
  // Service.FullQueueAnswers503WithRetryAfterAndAsyncJobsFinish for the early end).
  std::string events;
  for (int attempt = 0; attempt < 3 && events.find("event: end") == std::string::npos; ++attempt) {
    auto sse = c.Get(location + "/events", [&](const char* data, size_t n) {
      events.append(data, n);
      return events.find("event: end") == std::string::npos;
    });
  }
  EXPECT_NE(events.find("event: end"), std::string::npos) << events;
  auto job = c.Get(location);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->status, 200) << job->body;
  EXPECT_EQ(json::parse(job->body)["state"], "done");
}

// Request smuggling through the documented deployment (issue 41): each ambiguous request
// sent to nginx carries a request for a path of its own; whatever nginx makes of it, no
// instance ever answers that path, since nginx forwards no request of it as one.
TEST_F(Cluster, AmbiguousRequestsThroughNginxSmuggleNothingIntoKforge) {
  std::vector<std::string> paths;
  int n = 0;
  for (const auto& prefix : {std::string(), std::string("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")}) {
    for (const auto& c : framing_cases("")) {
      const std::string path = "/smuggled-" + std::to_string(n++);
      paths.push_back(path);
      const std::string smuggled = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
      std::string bytes;
      for (const auto& s : framing_cases(smuggled))
        if (std::string(s.name) == c.name) bytes = s.bytes;
      RawConnection conn(nginx_port_, nullptr);
      ASSERT_TRUE(conn.connected());
      conn.send(prefix + bytes + "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      // Whatever nginx answers (its own 400, or kforge's through it), until it closes.
      EXPECT_TRUE(conn.closed_within(10)) << c.name << ": nginx kept the connection open";
    }
  }
  // The access logs are written every 50 ms: once a marker sent after them all is in one,
  // each instance has written what it answered before.
  auto marker = via_nginx().Get("/smuggling-test-marker");
  ASSERT_TRUE(marker);
  auto log_of = [&](const std::string& id) {
    std::ifstream in(scratch_ / ("server-" + id + ".log"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    for (const auto& [id, s] : servers_) seen = seen || log_of(id).find("/smuggling-test-marker") != std::string::npos;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(seen) << "no instance logged the marker";
  for (const auto& [id, s] : servers_) {
    const std::string log = log_of(id);
    for (const auto& path : paths)
      EXPECT_EQ(log.find("\"" + path + "\""), std::string::npos) << "instance " << id << " answered " << path;
  }
}

// Issue 44: under a mixed load through nginx, an instance is SIGKILLed and later Redis is
// killed and restarted empty. Afterwards every artifact URL that any 200 answer gave
// downloads through nginx with its sha256 — the instances put back what they hold (read-
// repair, and a re-share of the local tier when Redis comes back empty) — except where
// every copy of the entry died; asking again through nginx then gives URLs that download.
TEST_F(Cluster, EveryUrlAnAnswerGaveDownloadsAfterAnInstanceAndRedisDie) {
  struct Given {
    std::string body, url, sha, key;
  };
  std::mutex mu;
  std::vector<Given> given;
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, failed{0};
  // Cold sources (each a new kernel) and repeats of a small set (hits on whichever instance).
  auto client = [&](int who) {
    auto c = via_nginx();
    for (int i = 0; !stop; ++i) {
      const int factor = i % 3 == 0 ? 300 + who * 1000 + i : 200 + (who * 7 + i) % 12;
      const std::string body = scale_request(factor);
      auto r = c.Post("/kernels", body, "application/json");
      if (!r || r->status != 200) {
        failed++;
        continue;
      }
      answered++;
      auto j = json::parse(r->body);
      std::lock_guard lock(mu);
      given.push_back({body, j["artifact"]["url"], j["artifact"]["sha256"], j["key"]});
    }
  };
  std::vector<std::thread> clients;
  for (int i = 0; i < 6; ++i) clients.emplace_back(client, i);
  auto wait_answers = [&](int n) {
    for (int i = 0; i < 600 && answered < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  };
  wait_answers(40);
  servers_["b"]->kill9();
  wait_answers(answered + 40);
  redis_->kill(SIGKILL);
  start_redis();  // empty, on the same port
  wait_answers(answered + 60);
  stop = true;
  for (auto& t : clients) t.join();
  ASSERT_GE(answered.load(), 140);

  // The live instances see the new generation and re-share their local tiers.
  for (const char* id : {"a", "c"}) {
    double generations = 0;
    for (int i = 0; i < 200 && generations < 1; ++i) {
      generations = metric(*servers_[id], "kforge_shared_tier_total{event=\"generation\"}");
      if (generations < 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_GE(generations, 1) << "instance " << id << " never saw Redis come back empty";
  }
  // Every URL downloads through nginx and matches its sha256 (the re-share runs in the
  // background: a URL gets a few seconds), or its entry died with b and Redis.
  auto c = via_nginx();
  size_t downloaded = 0, asked_again = 0;
  std::set<std::string> checked;
  for (const auto& g : given) {
    if (!checked.insert(g.url).second) continue;
    std::optional<httplib::Result> r;
    for (int i = 0; i < 50; ++i) {
      r.emplace(c.Get(g.url));
      if (*r && (*r)->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (*r && (*r)->status == 200) {
      EXPECT_EQ(core::sha256_hex((*r)->body), g.sha) << g.url;
      ++downloaded;
      continue;
    }
    // No copy left: not on a's or c's disk, not in Redis.
    for (const char* id : {"a", "c"})
      EXPECT_FALSE(fs::exists(scratch_ / ("cache-" + std::string(id)) / "v1" / "objects" / g.key.substr(0, 2) / g.key / "kernel.so"))
          << g.url << " is on " << id << "'s disk but does not download through nginx";
    EXPECT_TRUE(redis({"EXISTS", "kforge:v1:manifest:" + g.key}) == json(0)) << g.url;
    auto again = c.Post("/kernels", g.body, "application/json");
    ASSERT_TRUE(again && again->status == 200) << g.url;
    auto j = json::parse(again->body);
    auto so = c.Get(j["artifact"]["url"].get<std::string>());
    ASSERT_TRUE(so && so->status == 200) << "asked again: " << j["artifact"]["url"];
    EXPECT_EQ(core::sha256_hex(so->body), j["artifact"]["sha256"]);
    ++asked_again;
  }
  std::cout << "[ cluster  ] " << answered << " answers (" << failed << " failed while nginx moved on), "
            << checked.size() << " URLs: " << downloaded << " downloaded, " << asked_again
            << " asked again (every copy died)\n";
  double repairs = 0;
  for (const char* id : {"a", "c"}) repairs += metric(*servers_[id], "kforge_shared_tier_total{event=\"repair\"}");
  EXPECT_GT(repairs, 0) << "the live instances put entries back into the emptied Redis";
}

// Issue 44: a waiter on the build lease of an instance that was SIGKILLed takes the build
// over once that instance's registry key expires (10 s after its last heartbeat, written
// every 2 s), plus one 200 ms poll — not after the lease's 60 s TTL.
TEST_F(Cluster, ALeaseOfAKilledInstanceIsTakenOverWhenItsRegistrationExpires) {
  start_instance("d", "60");
  start_instance("e", "60");
  const std::string body = slow_request(17);
  auto started = servers_["d"]->client().Post("/kernels", {{"Prefer", "respond-async"}}, body, "application/json");
  ASSERT_TRUE(started && started->status == 202);
  std::string lease;
  for (int i = 0; i < 200; ++i) {
    auto keys = redis({"KEYS", "kforge:v1:lease:*"});
    if (keys.is_array() && !keys.empty()) {
      lease = keys[0];
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_FALSE(lease.empty()) << "d holds the build lease";
  auto waiter = std::async(std::launch::async, [&] { return post_json(*servers_["e"], "/kernels", body); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // e is waiting on the lease
  const auto killed = std::chrono::steady_clock::now();
  servers_["d"]->kill9();
  // The lease passes to e: its holder token starts with "e:".
  double takeover_s = -1;
  for (int i = 0; i < 600 && takeover_s < 0; ++i) {
    std::string holder;
    redis({"GET", lease}, &holder);
    if (holder.starts_with("e:"))
      takeover_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cout << "[ cluster  ] the lease of the killed instance was taken over after " << takeover_s << " s\n";
  ASSERT_GE(takeover_s, 0) << "e never took the lease over";
  EXPECT_LE(takeover_s, 10.0 + 0.2 + 1.0) << "registry expiry (10 s) plus one poll (0.2 s), and a second of slack";
  auto r = waiter.get();
  expect_scales(*servers_["e"], r, 17);
  EXPECT_EQ(metric(*servers_["e"], "kforge_shared_tier_total{event=\"dead_holder\"}"), 1);
}

}  // namespace
}  // namespace kforge::testing
