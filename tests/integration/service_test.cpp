// The production service over real HTTP (issue 5): jobs and single-flight, async answers
// and server-sent events, the sandbox, auth, limits, cache upkeep and faults.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"
#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A small CPU kernel; `salt` makes a distinct (cold) one.
std::string quick_kernel(int salt) {
  return json{{"backend", "cpu"},
              {"arch", "native"},
              {"source",
               "#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT "
               "__attribute__((visibility(\"default\")))\n"
               "extern \"C\" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, "
               "size_t* workspace_size, "
               "uint8_t* workspace, void* stream) {\n  if (workspace_size) { *workspace_size = 0; "
               "return 0; }\n"
               "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] + " +
                   std::to_string(salt) + ";\n  return 0;\n}\n"}}
      .dump();
}

// Keeps g++'s constant evaluator busy for about `loops` x 0.1 s.
std::string slow_kernel(int salt, int loops = 30) {
  return json{{"backend", "cpu"},
              {"arch", "native"},
              {"source",
               "#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT "
               "__attribute__((visibility(\"default\")))\n"
               "constexpr uint64_t burn(uint64_t x) {\n  for (int i = 0; i < " +
                   std::to_string(loops) +
                   "; ++i)\n    for (int j = 0; j < 50000; ++j) x = x * 6364136223846793005ull + "
                   "1442695040888963407ull;\n"
                   "  return x;\n}\nconstexpr uint64_t kBurnt = burn(" +
                   std::to_string(salt) +
                   ");\nextern \"C\" PT_EXPORT int KERNEL_NAME(float* y, size_t* workspace_size, "
                   "uint8_t* workspace, void* stream) {\n"
                   "  if (workspace_size) { *workspace_size = 0; return 0; }\n  y[0] = "
                   "float(kBurnt & 0xff);\n  return 0;\n}\n"}}
      .dump();
}

Reply post_with(const ServerProcess& s, const std::string& path, const std::string& body,
                const httplib::Headers& headers) {
  auto c = s.client();
  c.set_read_timeout(600);
  auto r = c.Post(path, headers, body, "application/json");
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.raw = r->body;
  out.content_type = r->get_header_value("Content-Type");
  out.body = json::parse(r->body, nullptr, false);
  return out;
}

// Polls /jobs/{id} until it ends.
json wait_job(const ServerProcess& s, const std::string& id) {
  for (int i = 0; i < 1200; ++i) {
    auto r = get(s, "/jobs/" + id);
    if (r.status == 200 && (r.body["state"] == "done" || r.body["state"] == "failed"))
      return r.body;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return json();
}

class Service : public ::testing::Test {
 protected:
  std::unique_ptr<ServerProcess> start(std::vector<std::string> args = {},
                                       const std::string& cache = "cache", std::vector<std::string> env = {}) {
    return std::make_unique<ServerProcess>(
        scratch_.path() / cache, scratch_.path() / ("server." + std::to_string(n_++) + ".log"),
        std::move(args), std::move(env));
  }
  std::string log_text() {
    std::string all;
    for (const auto& e : fs::directory_iterator(scratch_.path())) {
      if (e.path().extension() == ".log") all += core::read_file(e.path()).value_or("");
    }
    return all;
  }
  Scratch scratch_;
  int n_ = 0;
};

TEST_F(Service, ThirtyTwoIdenticalColdRequestsCompileOnce) {
  auto s = start({"--compile-jobs", "2"});
  const double runs0 = metric(*s, "kforge_compiler_runs_total");
  const std::string body = slow_kernel(7, 10);
  std::vector<std::future<Reply>> replies;
  for (int i = 0; i < 32; ++i)
    replies.push_back(
        std::async(std::launch::async, [&] { return post_json(*s, "/kernels", body); }));
  std::map<std::string, int> outcomes;
  std::set<std::string> keys;
  for (auto& f : replies) {
    Reply r = f.get();
    ASSERT_EQ(r.status, 200) << r.raw;
    ++outcomes[r.body["cache"].get<std::string>()];
    keys.insert(r.body["key"].get<std::string>());
  }
  EXPECT_EQ(metric(*s, "kforge_compiler_runs_total") - runs0, 1.0);
  EXPECT_EQ(keys.size(), 1u);
  EXPECT_EQ(outcomes["miss"], 1);
  EXPECT_EQ(outcomes["miss"] + outcomes["joined"] + outcomes["hit"], 32);
  EXPECT_GT(outcomes["joined"], 0);
  EXPECT_EQ(metric(*s, "kforge_cache_requests_total{outcome=\"joined\"}"), outcomes["joined"]);
}

TEST_F(Service, SixteenDistinctColdKernelsOnTwoWorkersAllFinish) {
  auto s = start({"--compile-jobs", "2", "--max-queue", "16"});
  std::vector<std::future<Reply>> replies;
  for (int i = 0; i < 16; ++i) {
    replies.push_back(std::async(
        std::launch::async, [&, i] { return post_json(*s, "/kernels", quick_kernel(1000 + i)); }));
  }
  std::set<std::string> keys;
  for (auto& f : replies) {
    Reply r = f.get();
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["cache"], "miss");
    keys.insert(r.body["key"]);
  }
  EXPECT_EQ(keys.size(), 16u);
  EXPECT_EQ(metric(*s, "kforge_workers"), 2);
  auto jobs = get(*s, "/jobs?limit=100");
  ASSERT_EQ(jobs.status, 200);
  EXPECT_EQ(jobs.body["jobs"].size(), 16u);
  for (const auto& j : jobs.body["jobs"]) {
    EXPECT_EQ(j["state"], "done");
    EXPECT_TRUE(j["phases"].contains("compiling") && j["phases"].contains("done")) << j.dump();
  }
}

TEST_F(Service, FullQueueAnswers503WithRetryAfterAndAsyncJobsFinish) {
  auto s = start({"--compile-jobs", "1", "--max-queue", "1"});
  const httplib::Headers async = {{"Prefer", "respond-async"}};
  Reply first = post_with(*s, "/kernels", slow_kernel(1), async);
  ASSERT_EQ(first.status, 202) << first.raw;
  const std::string id = first.body["id"];
  // Wait until the worker has taken it: then one more fits in the queue, and no more.
  for (int i = 0; i < 200 && get(*s, "/jobs/" + id).body["state"] == "queued"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Reply second = post_with(*s, "/kernels", slow_kernel(2), async);
  ASSERT_EQ(second.status, 202) << second.raw;
  auto c = s->client();
  auto third = c.Post("/kernels", async, slow_kernel(3), "application/json");
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 503) << third->body;
  EXPECT_FALSE(third->get_header_value("Retry-After").empty());
  EXPECT_NE(third->body.find("queue is full"), std::string::npos) << third->body;
  EXPECT_EQ(get(*s, "/readyz").status, 503);  // no room: not ready for more

  // Server-sent events follow the second job to its end.
  // A stream that ends early is followed up as EventSource does, by reconnecting; under a
  // loaded ctest -j2 one was seen to end after a `compiling` event (cause not found yet).
  std::string events;
  for (int attempt = 0; attempt < 3 && events.find("event: end") == std::string::npos; ++attempt) {
    auto sse = s->client();
    sse.set_read_timeout(120);
    auto r = sse.Get("/jobs/" + second.body["id"].get<std::string>() + "/events",
                     [&](const char* data, size_t n) {
                       events.append(data, n);
                       return true;
                     });
    ASSERT_TRUE(r);
  }
  EXPECT_NE(events.find("event: state"), std::string::npos) << events;
  EXPECT_NE(events.find("\"compiling\""), std::string::npos) << events;
  EXPECT_NE(events.find("event: end"), std::string::npos) << events;
  json done = wait_job(*s, id);
  EXPECT_EQ(done["state"], "done");
  EXPECT_EQ(done["http_status"], 200);
  EXPECT_EQ(done["result"]["cache"], "miss");
  EXPECT_EQ(get(*s, "/readyz").status, 200);

  // wait_ms: 0 answers 202 at once for a cold build; the same kernel later is a plain hit.
  json no_wait = json::parse(quick_kernel(5));
  no_wait["wait_ms"] = 0;
  Reply quick = post_json(*s, "/kernels", no_wait.dump());
  EXPECT_EQ(quick.status, 202) << quick.raw;
  EXPECT_EQ(wait_job(*s, quick.body["id"])["state"], "done");
  EXPECT_EQ(post_json(*s, "/kernels", quick_kernel(5)).body["cache"], "hit");
  EXPECT_EQ(get(*s, "/jobs/j0000000099999").status, 404);
}

TEST_F(Service, SandboxKeepsHostFilesOutAndEndsRunawayCompiles) {
  auto s = start({"--sandbox", "bwrap", "--compile-timeout", "4", "--compile-output-cap", "65536"});
  auto tc = get(*s, "/toolchains");
  EXPECT_EQ(tc.body["sandbox"]["mode"], "bwrap") << tc.raw;

  // A host file outside the toolchain: /etc/shadow, and a secret the test writes itself.
  const fs::path secret = scratch_.path() / "secret.h";
  const std::string marker = "KFORGE_SECRET_7f3a9c";
  ASSERT_TRUE(core::write_file_atomic(secret, "int " + marker + " = 1;\n"));
  for (const std::string& path : {std::string("/etc/shadow"), secret.string()}) {
    std::string src =
        "#include \"" + path + "\"\n" + json::parse(quick_kernel(11))["source"].get<std::string>();
    Reply r = post_json(*s, "/kernels",
                        json{{"backend", "cpu"}, {"arch", "native"}, {"source", src}}.dump());
    EXPECT_EQ(r.status, 422) << r.raw;
    EXPECT_NE(r.raw.find("No such file or directory"), std::string::npos) << r.raw;
    EXPECT_EQ(r.raw.find(marker), std::string::npos);
    if (auto shadow = core::read_file("/etc/shadow")) {
      std::istringstream lines(*shadow);
      for (std::string line; std::getline(lines, line);) {
        if (line.size() > 8)
          EXPECT_EQ(r.raw.find(line), std::string::npos) << "a line of /etc/shadow leaked";
      }
    }
  }
  // Runaway template recursion: ends at the timeout, with the reason.
  const std::string runaway = R"(#include <cstddef>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
// 2^48 distinct instantiations: never ends, yet never deeper than 48.
template <int N, unsigned long long M> struct G { static constexpr uint64_t v = G<N - 1, M * 2>::v + G<N - 1, M * 2 + 1>::v; };
template <unsigned long long M> struct G<0, M> { static constexpr uint64_t v = M; };
extern "C" PT_EXPORT int KERNEL_NAME(float* y, size_t* workspace_size, uint8_t* workspace, void* stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  y[0] = float(G<48, 1>::v & 0xff);
  return 0;
}
)";
  auto t0 = std::chrono::steady_clock::now();
  Reply r = post_json(*s, "/kernels",
                      json{{"backend", "cpu"}, {"arch", "native"}, {"source", runaway}}.dump());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  EXPECT_EQ(r.status, 422) << r.raw.substr(0, 2000);
  EXPECT_EQ(r.body["type"], "/problems/compile-timeout") << r.raw.substr(0, 2000);
  EXPECT_NE(r.body.value("detail", "").find("timed out"), std::string::npos)
      << r.body.value("detail", "");

  // An output flood is cut at the cap.
  std::string flood =
      "#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT "
      "__attribute__((visibility(\"default\")))\n"
      "#define W _Pragma(\"GCC warning \\\"flooding the log with a long warning message\\\"\")\n"
      "#define W4 W W W W\n#define W16 W4 W4 W4 W4\n#define W256 W16 W16 W16 W16 W16 W16 W16 W16 "
      "W16 W16 W16 W16 W16 W16 W16 W16\n"
      "W256 W256 W256 W256 W256 W256 W256 W256\n" +
      json::parse(quick_kernel(12))["source"].get<std::string>();
  r = post_json(*s, "/kernels",
                json{{"backend", "cpu"}, {"arch", "native"}, {"source", flood}}.dump());
  EXPECT_EQ(r.status, 422) << r.raw.substr(0, 500);
  EXPECT_NE(r.body.value("detail", "").find("output"), std::string::npos)
      << r.body.value("detail", "");
  EXPECT_LE(r.body.value("log", "").size(), 65536u + 4096u);
  EXPECT_EQ(get(*s, "/healthz").status, 200);
}

TEST_F(Service, NoRequestFieldReachesTheCompilerAsAFlag) {
  auto s = start();
  const json base = json::parse(quick_kernel(21));
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"options", {{"flags", {"-fplugin=/tmp/x.so"}}}}}, "/options/flags"},
      {{{"options", {{"extra_cflags", "-B/tmp"}}}}, "/options/extra_cflags"},
      {{{"options", {{"opt_level", "-specs=/tmp/evil"}}}}, "/options/opt_level"},
      {{{"arch", "@/etc/args"}}, "/arch"},
      {{{"arch", "-fplugin=/tmp/x.so"}}, "/arch"},
      {{{"arch", {"native", "-B/tmp"}}}, "/arch/1"},
      {{{"compiler", "/tmp/evil-g++"}}, "/compiler"},
  };
  for (const auto& [patch, field] : bad) {
    json body = base;
    body.update(patch);
    Reply r = post_json(*s, "/kernels", body.dump());
    EXPECT_EQ(r.status, 400) << patch.dump() << " " << r.raw;
    bool named = false;
    for (const auto& e : r.body.value("errors", json::array()))
      named = named || e.value("field", "") == field;
    EXPECT_TRUE(named) << patch.dump() << " " << r.raw;
  }
  EXPECT_EQ(metric(*s, "kforge_compiler_runs_total"), 0);
}

TEST_F(Service, PathTraversalInEveryUrlParameterIsRejected) {
  auto s = start({"--web-dir", (scratch_.path() / "web").string()});
  const std::string key(64, 'a');
  for (const std::string& path : std::vector<std::string>{
           "/kernels/..%2F..%2F..%2Fetc%2Fpasswd", "/kernels/../../etc/passwd",
           "/kernels/" + key + "/..%2F..%2Fmanifest.json",
           "/kernels/%2e%2e%2f%2e%2e%2fetc%2fpasswd/artifact", "/templates/..%2F..%2Fetc%2Fpasswd",
           "/jobs/..%2F..%2Fetc%2Fpasswd", "/jobs/../../etc/passwd/events",
           "/web/..%2F..%2F..%2Fetc%2Fpasswd", "/vendor/..%2F..%2Fetc%2Fpasswd"}) {
    Reply r = get(*s, path);
    EXPECT_TRUE(r.status == 400 || r.status == 404) << path << " -> " << r.status;
    EXPECT_EQ(r.raw.find("root:"), std::string::npos) << path;
  }
}

TEST_F(Service, TokensAndRoles) {
  const fs::path tokens = scratch_.path() / "tokens";
  ASSERT_TRUE(core::write_file_atomic(tokens,
                                      "# "
                                      "role:token\nread:read-token-0123456789\nsubmit:submit-token-"
                                      "0123456789\nadmin:admin-token-0123456789\n"));
  auto s = start({"--token-file", tokens.string()});
  auto with = [](const std::string& t) {
    return httplib::Headers{{"Authorization", "Bearer " + t}};
  };
  EXPECT_EQ(post_json(*s, "/kernels", quick_kernel(31)).status, 401);
  EXPECT_EQ(post_with(*s, "/kernels", quick_kernel(31), with("wrong-token-0123456789")).status,
            401);
  Reply forbidden = post_with(*s, "/kernels", quick_kernel(31), with("read-token-0123456789"));
  EXPECT_EQ(forbidden.status, 403) << forbidden.raw;
  EXPECT_NE(forbidden.raw.find("submit"), std::string::npos);
  Reply ok = post_with(*s, "/kernels", quick_kernel(31), with("submit-token-0123456789"));
  ASSERT_EQ(ok.status, 200) << ok.raw;
  EXPECT_EQ(get(*s, "/kernels/" + ok.body["key"].get<std::string>()).status, 401);
  EXPECT_EQ(get(*s, "/kernels/" + ok.body["key"].get<std::string>(), with("read-token-0123456789"))
                .status,
            200);
  EXPECT_EQ(get(*s, "/metrics").status, 401);
  EXPECT_EQ(get(*s, "/healthz").status, 200);
  EXPECT_EQ(get(*s, "/").status, 200);  // the page itself asks for a token
  EXPECT_EQ(get(*s, "/status", with("admin-token-0123456789")).body["auth"]["enabled"], true);
  s.reset();
  const std::string log = log_text();
  for (const char* t :
       {"read-token-0123456789", "submit-token-0123456789", "wrong-token-0123456789"}) {
    EXPECT_EQ(log.find(t), std::string::npos) << "a token appears in the log";
  }
}

TEST_F(Service, CompilerKilledMidRunIsAClearErrorAndNotCached) {
  auto s = start({"--compile-jobs", "1"});
  const std::string body = slow_kernel(41);
  auto reply = std::async(std::launch::async, [&] { return post_json(*s, "/kernels", body); });
  // Find the compiler proper (cc1plus) working in this test's cache, and kill it.
  pid_t victim = 0;
  const std::string cache = (scratch_.path() / "cache").string();
  for (int i = 0; i < 600 && !victim; ++i) {
    for (const auto& p : fs::directory_iterator("/proc")) {
      const std::string comm = core::read_file(p.path() / "comm").value_or("");
      std::error_code ec;
      if (comm.starts_with("cc1plus") &&
          fs::read_symlink(p.path() / "cwd", ec).string().starts_with(cache)) {
        victim = std::stoi(p.path().filename().string());
      }
    }
    if (!victim) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(victim, 0) << "the compiler never started";
  ::kill(victim, SIGKILL);
  Reply r = reply.get();
  EXPECT_EQ(r.status, 422) << r.raw;
  EXPECT_NE(r.raw.find("not cached"), std::string::npos) << r.raw;
  EXPECT_EQ(get(*s, "/healthz").status, 200);
  Reply again = post_json(*s, "/kernels", body);
  EXPECT_EQ(again.status, 200) << again.raw;
  EXPECT_EQ(again.body["cache"], "miss");
}

TEST_F(Service, CorruptArtifactIsDetectedWhenServedAndByVerifyThenRebuilt) {
  auto s = start();
  Reply a = post_json(*s, "/kernels", quick_kernel(51));
  Reply b = post_json(*s, "/kernels", quick_kernel(52));
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  auto flip = [&](const std::string& key) {
    fs::path so =
        scratch_.path() / "cache" / "v1" / "objects" / key.substr(0, 2) / key / "kernel.so";
    std::fstream f(so, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  };
  flip(a.body["key"]);
  Reply served = get(*s, "/kernels/" + a.body["key"].get<std::string>() + "/artifact");
  EXPECT_EQ(served.status, 404);
  EXPECT_NE(served.raw.find("corrupt"), std::string::npos) << served.raw;
  Reply rebuilt = post_json(*s, "/kernels", quick_kernel(51));
  EXPECT_EQ(rebuilt.body["cache"], "miss");
  EXPECT_EQ(get(*s, "/kernels/" + a.body["key"].get<std::string>() + "/artifact").status, 200);

  flip(b.body["key"]);
  const std::string out = (scratch_.path() / "verify.out").string();
  const std::string cmd = std::string(KFORGE_BINARY) + " cache verify --cache-dir " +
                          (scratch_.path() / "cache").string() + " > " + out;
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 1);  // found (and removed) a corrupt entry
  json v = json::parse(core::read_file(out).value_or("{}"));
  EXPECT_EQ(v["checked"], 2);
  ASSERT_EQ(v["removed"].size(), 1u);
  EXPECT_EQ(v["removed"][0], b.body["key"]);
  EXPECT_EQ(post_json(*s, "/kernels", quick_kernel(52)).body["cache"], "miss");
}

// The memo of verified files (issue 12) must not outlive a change: the served file is
// verified once, memoised (files older than a second), then a byte flips.
TEST_F(Service, AFlippedByteIsNeverServedAfterTheVerificationIsMemoised) {
  auto s = start({}, "cache", {kClockAhead});
  Reply a = post_json(*s, "/kernels", quick_kernel(53));
  ASSERT_EQ(a.status, 200);
  const std::string key = a.body["key"];
  const std::string url = "/kernels/" + key + "/artifact";
  Reply good = get(*s, url);
  ASSERT_EQ(good.status, 200);
  ASSERT_EQ(core::sha256_hex(good.raw), a.body["artifact"]["sha256"]);
  ASSERT_EQ(get(*s, url).raw, good.raw) << "served from the memo";
  // ... by the event front's loop, from memory: the path whose bytes the flip must not reach.
  ASSERT_EQ(metric(*s, "kforge_http_loop_answers_total"), 1);
  {
    std::fstream f(scratch_.path() / "cache" / "v1" / "objects" / key.substr(0, 2) / key / "kernel.so",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put(char(good.raw[100] ^ 0x01));
  }
  Reply served = get(*s, url);
  EXPECT_EQ(served.status, 404) << "a flipped byte is never served";
  EXPECT_NE(served.raw.find("corrupt"), std::string::npos) << served.raw;
  EXPECT_EQ(post_json(*s, "/kernels", quick_kernel(53)).body["cache"], "miss");
}

// Downloads are content-addressed: an ETag (the sha256), immutable caching, 304, HEAD and ranges.
TEST_F(Service, ArtifactDownloadsAreCacheableRangedAndHeadable) {
  auto s = start();
  Reply a = post_json(*s, "/kernels", quick_kernel(54));
  ASSERT_EQ(a.status, 200);
  const std::string url = "/kernels/" + a.body["key"].get<std::string>() + "/artifact";
  const std::string etag = "\"" + a.body["artifact"]["sha256"].get<std::string>() + "\"";
  auto c = s->client();
  auto full = c.Get(url);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 200);
  EXPECT_EQ(full->get_header_value("ETag"), etag);
  EXPECT_NE(full->get_header_value("Cache-Control").find("immutable"), std::string::npos);
  auto again = c.Get(url, {{"If-None-Match", etag}});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 304);
  EXPECT_TRUE(again->body.empty());
  auto head = c.Head(url);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->get_header_value("Content-Length"), std::to_string(full->body.size()));
  EXPECT_TRUE(head->body.empty());
  auto part = c.Get(url, {{"Range", "bytes=1-3"}});
  ASSERT_TRUE(part);
  EXPECT_EQ(part->status, 206);
  EXPECT_EQ(part->body, full->body.substr(1, 3));  // "ELF"
}

// Behind nginx (--accel-redirect): a download is an empty 200 naming the file under the
// cache root for nginx to send; the source and the log are still served by kforge.
TEST_F(Service, AccelRedirectHandsDownloadsToTheProxy) {
  auto s = start({"--accel-redirect", "/kforge-cache/"}, "cache", {kClockAhead});
  Reply a = post_json(*s, "/kernels", quick_kernel(56));
  ASSERT_EQ(a.status, 200);
  const std::string key = a.body["key"];
  auto c = s->client();
  auto so = c.Get("/kernels/" + key + "/artifact");
  ASSERT_TRUE(so);
  EXPECT_EQ(so->status, 200);
  EXPECT_TRUE(so->body.empty());
  const std::string target = so->get_header_value("X-Accel-Redirect");
  EXPECT_EQ(target, "/kforge-cache/v1/objects/" + key.substr(0, 2) + "/" + key + "/kernel.so");
  auto bytes = core::read_file(scratch_.path() / "cache" / target.substr(std::string("/kforge-cache/").size()));
  ASSERT_TRUE(bytes);
  EXPECT_EQ(core::sha256_hex(*bytes), a.body["artifact"]["sha256"]) << "the file it names is the artifact";
  // Once the entry is verified in memory (its files count as old: the clock runs ahead)
  // the event front's loop answers it the same way.
  ASSERT_EQ(c.Get("/kernels/" + key)->status, 200);  // verified now, and memoised
  const double on_loop = metric(*s, "kforge_http_loop_answers_total");
  auto again = c.Get("/kernels/" + key + "/artifact");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  EXPECT_TRUE(again->body.empty());
  EXPECT_EQ(again->get_header_value("X-Accel-Redirect"), target);
  EXPECT_EQ(again->get_header_value("ETag"), so->get_header_value("ETag"));
  EXPECT_EQ(metric(*s, "kforge_http_loop_answers_total"), on_loop + 1);
  auto src = c.Get("/kernels/" + key + "/source");
  ASSERT_TRUE(src);
  EXPECT_EQ(src->status, 200);
  EXPECT_FALSE(src->has_header("X-Accel-Redirect"));
  EXPECT_NE(src->body.find(a.body["kernel_name"].get<std::string>()), std::string::npos);
}

// Hits are counted, not jobs (issue 12): after 10,000 hits /jobs still lists the one build,
// and the counts are on /status, /metrics and the kernel.
TEST_F(Service, TenThousandHitsAreCountedButAreNotJobs) {
  auto s = start();
  Reply a = post_json(*s, "/kernels", quick_kernel(55));
  ASSERT_EQ(a.status, 200);
  const std::string key = a.body["key"];
  const std::string body = quick_kernel(55);
  constexpr int kThreads = 4, kEach = 2500;  // half POST hits, half artifact downloads
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto c = s->client();
      c.set_keep_alive(true);
      c.set_tcp_nodelay(true);  // a POST's body is a second write: no delayed-ACK wait for it
      for (int i = 0; i < kEach; ++i) {
        auto r = (i + t) % 2 ? c.Post("/kernels", body, "application/json") : c.Get("/kernels/" + key + "/artifact");
        ok += r && r->status == 200;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(ok, kThreads * kEach);

  Reply jobs = get(*s, "/jobs?limit=1000");
  ASSERT_EQ(jobs.status, 200);
  ASSERT_EQ(jobs.body["jobs"].size(), 1u) << "builds only: " << jobs.raw.substr(0, 400);
  EXPECT_EQ(jobs.body["jobs"][0]["cache"], "miss");
  Reply status = get(*s, "/status");
  EXPECT_EQ(status.body["hits"]["total"], kThreads * kEach);
  EXPECT_EQ(status.body["hits"]["by_route"]["POST /kernels"], kThreads * kEach / 2);
  EXPECT_EQ(status.body["hits"]["by_route"]["GET /kernels/{key}/artifact"], kThreads * kEach / 2);
  ASSERT_EQ(status.body["hits"]["top_clients"].size(), 1u);
  EXPECT_EQ(status.body["hits"]["top_clients"][0]["hits"], kThreads * kEach);
  EXPECT_EQ(status.body["cache"]["hits"], kThreads * kEach / 2) << "kernel answers that were hits";
  Reply kernel = get(*s, "/kernels/" + key);
  EXPECT_EQ(kernel.body["hits"]["count"], kThreads * kEach);
  EXPECT_GT(kernel.body["hits"]["last_at"].get<double>(), 0);
  EXPECT_EQ(metric(*s, "kforge_hits_total{route=\"POST /kernels\"}"), kThreads * kEach / 2);
}

// The event front (api/front.hpp) answers hits from memory on its loops and hands every
// other request to httplib on a worker. On one keep-alive connection both keep HTTP's
// order, pipelined or byte by byte, and the connection returns to a loop after each
// hand-off; Connection: close and a client's half-close are honoured.
TEST_F(Service, TheEventFrontKeepsPipelinedAnswersInOrderAcrossHandOffs) {
  auto s = start({}, "cache", {kClockAhead});
  const std::string body = quick_kernel(56);
  Reply a = post_json(*s, "/kernels", body);
  ASSERT_EQ(a.status, 200);
  const std::string key = a.body["key"];
  const std::string sha = a.body["artifact"]["sha256"];
  const std::string artifact = "/kernels/" + key + "/artifact";
  ASSERT_EQ(get(*s, artifact).status, 200);  // read once: now in memory, for the loop
  ASSERT_EQ(post_json(*s, "/kernels", body).status, 200);  // a hit: its bytes are known now
  const double on_loop = metric(*s, "kforge_http_loop_answers_total");
  const double handed_off = metric(*s, "kforge_http_handed_off_total");

  const std::string post = "POST /kernels HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body;
  const std::string get_artifact = "GET " + artifact + " HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string healthz = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";  // never a loop's
  const std::string head = "HEAD " + artifact + " HTTP/1.1\r\nHost: x\r\n\r\n";
  RawConnection c(*s);
  ASSERT_TRUE(c.connected());
  c.send(post + get_artifact + healthz + head + post + healthz + get_artifact);  // one write
  auto p1 = c.read_answer();
  ASSERT_EQ(p1.status, 200) << p1.head;
  EXPECT_EQ(nlohmann::json::parse(p1.body)["cache"], "hit");
  EXPECT_EQ(nlohmann::json::parse(p1.body)["key"], key);
  auto g1 = c.read_answer();
  ASSERT_EQ(g1.status, 200);
  EXPECT_EQ(core::sha256_hex(g1.body), sha);
  EXPECT_NE(g1.head.find("ETag: \"" + sha + "\""), std::string::npos) << g1.head;
  auto h1 = c.read_answer();
  ASSERT_EQ(h1.status, 200);
  EXPECT_NE(h1.body.find("ok"), std::string::npos) << h1.body;
  auto hd = c.read_answer(/*head_request=*/true);
  ASSERT_EQ(hd.status, 200);
  EXPECT_NE(hd.head.find("Content-Length: " + std::to_string(g1.body.size())), std::string::npos) << hd.head;
  auto p2 = c.read_answer();
  ASSERT_EQ(p2.status, 200);
  EXPECT_EQ(nlohmann::json::parse(p2.body)["cache"], "hit");
  EXPECT_EQ(c.read_answer().status, 200);  // healthz
  auto g2 = c.read_answer();
  ASSERT_EQ(g2.status, 200);
  EXPECT_EQ(g2.body, g1.body);
  // A head that arrives a byte at a time is still one request.
  for (char ch : get_artifact) c.send(std::string(1, ch));
  auto g3 = c.read_answer();
  ASSERT_EQ(g3.status, 200);
  EXPECT_EQ(g3.body, g1.body);
  // A client that sends many requests before it reads anything: the loop stops reading it
  // while 4 MiB of answers wait, then answers the rest as the client catches up, in order.
  constexpr int kMany = 1500;
  std::string many;
  for (int i = 0; i < kMany; ++i) many += get_artifact;
  c.send(many);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  int same = 0;
  for (int i = 0; i < kMany; ++i) {
    auto g = c.read_answer();
    if (g.status != 200) break;
    same += g.body == g1.body;
  }
  EXPECT_EQ(same, kMany);
  // Connection: close ends it after the answer.
  c.send("GET " + artifact + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  auto g4 = c.read_answer();
  ASSERT_EQ(g4.status, 200);
  EXPECT_NE(g4.head.find("Connection: close"), std::string::npos) << g4.head;
  EXPECT_TRUE(c.closed_within(5));

  // A client that half-closes after its request still gets the answer.
  RawConnection d(*s);
  d.send(post);
  d.shutdown_write();
  auto p3 = d.read_answer();
  ASSERT_EQ(p3.status, 200);
  EXPECT_EQ(nlohmann::json::parse(p3.body)["cache"], "hit");
  EXPECT_TRUE(d.closed_within(5));

  // Of these requests (and the ones reading the metrics), the hits were the loop's and
  // the rest went to a worker: nothing answered twice, nothing lost.
  EXPECT_EQ(metric(*s, "kforge_http_loop_answers_total") - on_loop, 8 + kMany);
  EXPECT_EQ(metric(*s, "kforge_http_handed_off_total") - handed_off, 2 + 2);  // healthz, and 2 metrics reads
}

// A client that stops halfway holds nothing for long: a partial head on a loop, a partial
// body on a worker, each dropped after --read-timeout; the service answers others meanwhile.
TEST_F(Service, StalledClientsAreDroppedAfterTheReadTimeout) {
  auto s = start({"--read-timeout", "1"});
  RawConnection head(*s), body(*s);
  ASSERT_TRUE(head.connected() && body.connected());
  head.send("GET /kernels/");
  body.send("POST /render HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{");
  EXPECT_EQ(get(*s, "/healthz").status, 200);
  EXPECT_TRUE(head.closed_within(5));
  EXPECT_TRUE(body.closed_within(5));
  EXPECT_EQ(get(*s, "/healthz").status, 200);
}

TEST_F(Service, FullCacheFilesystemIsAClearErrorAndTheServiceStaysUp) {
  const fs::path mnt = scratch_.path() / "small";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here: " << std::strerror(errno);
  }
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  auto s = std::make_unique<ServerProcess>(mnt / "cache", scratch_.path() / "server.full.log");
  // Fill the filesystem, leaving the cache a few bytes.
  {
    std::ofstream fill(mnt / "fill", std::ios::binary);
    std::string block(4096, 'x');
    while (fill.write(block.data(), block.size())) {
    }
  }
  Reply r = post_json(*s, "/kernels", quick_kernel(61));
  EXPECT_EQ(r.status, 500) << r.raw;  // the disk, not the source: not a compile error
  EXPECT_NE(r.raw.find("No space left on device"), std::string::npos) << r.raw;
  EXPECT_EQ(get(*s, "/healthz").status, 200);
  fs::remove(mnt / "fill");
  Reply ok = post_json(*s, "/kernels", quick_kernel(61));
  EXPECT_EQ(ok.status, 200) << ok.raw;
  EXPECT_EQ(get(*s, "/kernels/" + ok.body["key"].get<std::string>() + "/artifact").status, 200);
}

TEST_F(Service, LeastRecentlyUsedEvictionKeepsTheCacheUnderItsBound) {
  // Each small kernel's entry is ~20 KB: a bound of 50 KB holds two.
  auto s = start({"--cache-max-bytes", "50000"});
  Reply k1 = post_json(*s, "/kernels", quick_kernel(71));
  Reply k2 = post_json(*s, "/kernels", quick_kernel(72));
  ASSERT_EQ(k1.status, 200);
  ASSERT_EQ(k2.status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(post_json(*s, "/kernels", quick_kernel(71)).body["cache"],
            "hit");  // k1 is now the most recent
  Reply k3 = post_json(*s, "/kernels", quick_kernel(73));
  ASSERT_EQ(k3.status, 200);
  EXPECT_EQ(get(*s, "/kernels/" + k2.body["key"].get<std::string>()).status, 404)
      << "the least recently used goes first";
  EXPECT_EQ(get(*s, "/kernels/" + k3.body["key"].get<std::string>()).status, 200);
  EXPECT_GE(metric(*s, "kforge_cache_evictions_total"), 1);
  EXPECT_LE(metric(*s, "kforge_cache_max_bytes"), 50000);
}

TEST_F(Service, TwoProcessesShareOneCacheWithoutCorruptingIt) {
  auto a = start({}, "shared");
  auto b = start({}, "shared");
  std::vector<std::future<Reply>> replies;
  for (int i = 0; i < 8; ++i) {
    replies.push_back(std::async(std::launch::async, [&, i] {
      return post_json(i % 2 ? *a : *b, "/kernels", quick_kernel(80 + i / 2));
    }));
  }
  for (auto& f : replies) EXPECT_EQ(f.get().status, 200);
  const std::string cmd = std::string(KFORGE_BINARY) + " cache verify --cache-dir " +
                          (scratch_.path() / "shared").string() + " > /dev/null";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0);
  // Restarting one does not clear the other's staging.
  a.reset();
  a = start({}, "shared");
  EXPECT_EQ(post_json(*b, "/kernels", quick_kernel(99)).status, 200);
}

TEST_F(Service, MetricsReadyzAccessLogAndSettings) {
  const fs::path config = scratch_.path() / "kforge.conf";
  ASSERT_TRUE(core::write_file_atomic(config, "# settings\nmax-queue = 7\ncompile-jobs = 3\n"));
  auto s = start({"--config", config.string()});
  ASSERT_EQ(post_json(*s, "/kernels", quick_kernel(91)).status, 200);
  // The access log and its counters are written just after the answer has gone out.
  auto m = get(*s, "/metrics");
  for (int i = 0; i < 100 && m.raw.find("route=\"/kernels\"") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m = get(*s, "/metrics");
  }
  for (const char* series :
       {"kforge_http_requests_total{route=\"/kernels\",method=\"POST\",status=\"200\"}",
        "kforge_cache_requests_total{outcome=\"miss\"}", "kforge_queue_depth",
        "kforge_workers_busy",
        "kforge_compile_duration_seconds_bucket{backend=\"cpu\",le=\"+Inf\"}", "kforge_cache_bytes",
        "kforge_cache_entries", "kforge_cache_evictions_total", "kforge_sandbox_failures_total"}) {
    EXPECT_NE(m.raw.find(series), std::string::npos) << series;
  }
  EXPECT_EQ(metric(*s, "kforge_queue_capacity"), 7);
  EXPECT_EQ(metric(*s, "kforge_workers"), 3);
  EXPECT_EQ(get(*s, "/readyz").status, 200);
  s.reset();
  // JSON lines with request ids.
  bool seen = false;
  std::istringstream lines(log_text());
  for (std::string line; std::getline(lines, line);) {
    auto j = json::parse(line, nullptr, false);
    if (j.is_object() && j.value("event", "") == "access" && j.value("path", "") == "/kernels") {
      seen = !j.value("request_id", "").empty() && j.value("status", 0) == 200;
    }
  }
  EXPECT_TRUE(seen);
  // --help documents every setting.
  const std::string out = (scratch_.path() / "help.out").string();
  ASSERT_EQ(std::system((std::string(KFORGE_BINARY) + " serve --help > " + out).c_str()), 0);
  const std::string help = core::read_file(out).value_or("");
  for (const char* name :
       {"--compile-jobs", "--max-queue", "--sandbox", "--token-file", "--tls-cert",
        "--cache-max-bytes", "--request-deadline", "--read-timeout", "--config", "KFORGE_"}) {
    EXPECT_NE(help.find(name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace kforge::testing
