// Hostile requests and hostile kernels against the real server (issue 18): no input gives a
// 5xx, a fork bomb stops at RLIMIT_NPROC, a kernel cannot pass its own printing off as the
// runner's result, no size or offset wraps past the storage limit, a lying Content-Length
// is answered at once, and a seeded mutation run over every route's request schema.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Sends `request` as is (any bytes, no client-side encoding) and reads one answer, waiting
// up to `timeout_s` for each piece. Returns the status (0: no whole answer) and the body.
std::pair<int, std::string> raw_http(const ServerProcess& s, const std::string& request, int timeout_s = 20) {
  RawConnection c(s);
  if (!c.connected()) return {0, ""};
  c.send(request);
  auto a = c.read_answer(false, timeout_s);
  return {std::max(a.status, 0), a.body};
}

// A strict parse: throws on bytes that are not UTF-8, unlike Reply::body.
bool strict_json(const std::string& text) {
  try {
    (void)json::parse(text).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

std::string first_field(const Reply& r) {
  if (!r.body.is_object() || !r.body.contains("errors") || r.body["errors"].empty()) return "(none)";
  return r.body["errors"][0].value("field", "(none)");
}

json source_request(const std::string& body) { return cpu_source_request(body, 64, 2); }

json gemm_request(const std::string& backend) {
  json j = {{"backend", backend},
            {"template", "gemm"},
            {"inputs", {{{"name", "A"}, {"dtype", "float16"}, {"sizes", {64, 64}}}, {{"name", "B"}, {"dtype", "float16"}, {"sizes", {64, 64}}}}},
            {"output", {{"name", "C"}, {"dtype", "float16"}, {"sizes", {64, 64}}}}};
  if (backend == "cuda") j["arch"] = "sm_90a";
  if (backend == "rocm") j["arch"] = "gfx90a";
  if (backend == "cpu") {
    for (auto* t : {&j["inputs"][0], &j["inputs"][1], &j["output"]}) (*t)["dtype"] = "float32";
  }
  return j;
}

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(
        scratch_ / "cache", scratch_ / "server.log",
        std::vector<std::string>{"--bench-timeout", "30", "--sandbox-nproc", "256", "--max-body", "1048576"});
  }
  Scratch scratch_;
  std::unique_ptr<ServerProcess> server_;
};

// (1) Invalid UTF-8: in a body, in a URL, in a kernel's printing, and a tail cut mid-character.
TEST_F(Hostile, InvalidUtf8IsA4xxOrSanitizedNeverA500) {
  for (const std::string path : {"/templates/%ff%fe", "/templates/\xff\xfe", "/kernels/%ff", "/jobs/%ff%fe", "/nowhere/%c3"}) {
    auto [status, body] = raw_http(*server_, "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_TRUE(status == 400 || status == 404) << path << ": " << status << " " << body;
    EXPECT_TRUE(strict_json(body)) << path << ": " << body;
  }
  json req = source_request("return 0;");
  std::string body = req.dump();
  body.replace(body.find("\"cpu\""), 5, "\"c\xff\xfe\"");
  auto r = post_json(*server_, "/kernels", body);
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(first_field(r), "/backend") << r.raw;
  EXPECT_TRUE(strict_json(r.raw)) << r.raw;

  // A benchmarked kernel that prints bytes that are not UTF-8, and one whose 2,000-byte
  // tail starts in the middle of a character.
  for (const std::string print : {R"(printf("bad \xff\xfe bytes\n");)",
                                  R"(for (int i = 0; i < 1500; ++i) fputs("\xc3\xa9", stdout); fputs("\xc3", stdout);)"}) {
    json k = source_request("if (x) { " + print + " fflush(stdout); } return 3;");
    auto [status, text] = raw_http(*server_, "POST /kernels HTTP/1.1\r\nHost: x\r\nPrefer: respond-async\r\nContent-Type: application/json\r\nContent-Length: " +
                                                 std::to_string(k.dump().size()) + "\r\nConnection: close\r\n\r\n" + k.dump());
    ASSERT_TRUE(status == 200 || status == 202) << status << " " << text;
    ASSERT_TRUE(strict_json(text)) << text;
    json j = json::parse(text);
    const std::string job = j.value("id", j.value("job", ""));
    json done = j;
    for (int i = 0; i < 600 && !j.contains("benchmark") && !job.empty(); ++i) {
      auto g = raw_http(*server_, "GET /jobs/" + job + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      ASSERT_EQ(g.first, 200) << g.second;
      ASSERT_TRUE(strict_json(g.second)) << g.second;
      done = json::parse(g.second);
      if (done.value("state", "") == "done" || done.value("state", "") == "failed") break;
      usleep(100 * 1000);
    }
    const std::string dumped = done.dump();
    EXPECT_NE(dumped.find("the kernel returned 3"), std::string::npos) << dumped.substr(0, 3000);
  }
  EXPECT_EQ(get(*server_, "/healthz").status, 200);
}

// (2) A wrongly typed params.mma is a 400 naming it, on every backend, from /render and /kernels.
TEST_F(Hostile, WronglyTypedTemplateParamsAre400sNamingTheParam) {
  for (const std::string backend : {"cuda", "cpu", "rocm"}) {
    for (const json& bad : {json(5), json(nullptr), json::array({"wgmma"}), json::object(), json(1.5), json(true)}) {
      json req = gemm_request(backend);
      const std::string param = backend == "cpu" ? "mr" : backend == "cuda" ? "mma" : "block_m";
      req["params"] = {{param, bad}};
      for (const char* route : {"/render", "/kernels"}) {
        auto r = post_json(*server_, route, req.dump());
        EXPECT_EQ(r.status, 400) << backend << " " << bad.dump() << " " << route << ": " << r.raw;
        // Without the backend's compiler the answer names /backend: still a 400.
        if (r.raw.find("/backend") == std::string::npos) {
          EXPECT_EQ(first_field(r), "/params/" + param) << r.raw;
        }
      }
    }
  }
}

// (3) Offsets and strides at the int64 edges: 400 naming the field, never a 200.
TEST_F(Hostile, StorageOverflowIsRefused) {
  const int64_t max = INT64_MAX;
  auto with = [](json req, const std::string& where, const json& patch) {
    json& t = where == "output" ? req["output"] : req["inputs"][0];
    t.update(patch);
    return req;
  };
  const json base = gemm_request("cpu");
  struct Case {
    json req;
    std::string field;
  };
  const std::vector<Case> cases = {
      {with(base, "output", {{"offset", max}}), "/output/offset"},
      {with(base, "input", {{"offset", max}}), "/inputs/0/offset"},
      {with(base, "output", {{"sizes", {int64_t{1} << 31, 24}}, {"strides", {int64_t{1} << 33, 1}}}), "/output/strides"},
      {with(base, "input", {{"sizes", {int64_t{1} << 31, 24}}, {"strides", {int64_t{1} << 33, 1}}}), "/inputs/0/strides"},
      {with(base, "output", {{"offset", int64_t{1} << 62}}), "/output/offset"},
  };
  for (const auto& c : cases) {
    auto r = post_json(*server_, "/render", c.req.dump());
    EXPECT_EQ(r.status, 400) << c.field << ": " << r.raw;
    EXPECT_EQ(first_field(r), c.field) << r.raw;
  }
  json src = source_request("return 0;");
  src["benchmark"]["output"]["offset"] = max;
  auto r = post_json(*server_, "/kernels", src.dump());
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(first_field(r), "/benchmark/output/offset") << r.raw;
}

// (4) A fork bomb inside a benchmark stops at RLIMIT_NPROC (even when kforge is root), fast.
TEST_F(Hostile, ForkBombStopsAtTheProcessLimit) {
  const auto t0 = Clock::now();
  auto r = post_json(*server_, "/kernels", source_request(R"(
  if (x) {
    int n = 0;
    for (; n < 100000; ++n) {
      pid_t p = fork();
      if (p < 0) break;
      if (p == 0) { pause(); _exit(0); }
    }
    printf("forks: %d\n", n);
    return n < 100000 ? 7 : 0;
  }
  return 0;)").dump());
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& b = r.body["benchmark"];
  EXPECT_EQ(b["status"], "failed") << b.dump();
  EXPECT_NE(b.value("reason", "").find("returned 7"), std::string::npos) << b.dump();
  const std::string tail = b.value("output_tail", "");
  ASSERT_NE(tail.find("forks: "), std::string::npos) << b.dump();
  EXPECT_LE(std::stoi(tail.substr(tail.find("forks: ") + 7)), 256) << tail;
  EXPECT_LT(s, 20.0) << "the bomb should fail at the limit, well before the 30 s timeout";
  EXPECT_EQ(get(*server_, "/healthz").status, 200);
  EXPECT_TRUE(server_->alive());
}

// (5) A kernel that prints a result line and _exits forges nothing.
TEST_F(Hostile, KernelCannotForgeItsBenchmarkResult) {
  auto r = post_json(*server_, "/kernels", source_request(R"(
  if (x) {
    printf("{\"status\":\"ok\",\"median_ms\":0.000123,\"min_ms\":0.0001,\"iters\":100,\"device\":{}}\n");
    fflush(stdout);
    _exit(0);
  }
  return 0;)").dump());
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& b = r.body["benchmark"];
  EXPECT_EQ(b["status"], "failed") << b.dump();
  EXPECT_NE(b.value("reason", "").find("without a result"), std::string::npos) << b.dump();
  auto k = get(*server_, "/kernels/" + r.body["key"].get<std::string>());
  ASSERT_EQ(k.status, 200);
  EXPECT_EQ(k.raw.find("0.000123"), std::string::npos) << k.raw;

  // An honest source-mode timing is shown, marked as measured around untrusted code.
  auto ok = post_json(*server_, "/kernels", source_request("for (int64_t i = 0; i < n; ++i) y[i] = x[i];\n  return 0;").dump());
  ASSERT_EQ(ok.status, 200) << ok.raw;
  EXPECT_EQ(ok.body["benchmark"]["status"], "ok") << ok.raw;
  EXPECT_EQ(ok.body["benchmark"]["trusted"], false) << ok.raw;
}

// (6) A Content-Length that lies is answered at once; the environment names no host path.
TEST_F(Hostile, BadContentLengthIsAnsweredAtOnceAndTheEnvironmentHidesTheCache) {
  for (const std::string len : {"-1", "18446744073709551616", "18446744073709551615", "9223372036854775808", "1e3", "+5", "0x10"}) {
    const auto t0 = Clock::now();
    auto [status, body] = raw_http(*server_, "POST /kernels HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + len + "\r\n\r\n{", 20);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(status, 400) << len << ": " << body;
    EXPECT_LT(s, 5.0) << len << " was answered only after " << s << " s";
    EXPECT_TRUE(strict_json(body)) << body;
  }
  auto r = post_json(*server_, "/kernels", source_request(R"(
  if (x) { printf("HOME=%s TMPDIR=%s PWD=%s\n", getenv("HOME"), getenv("TMPDIR"), getenv("PWD")); fflush(stdout); }
  return 5;)").dump());
  ASSERT_EQ(r.status, 200) << r.raw;
  const std::string tail = r.body["benchmark"].value("output_tail", "");
  EXPECT_NE(tail.find("HOME="), std::string::npos) << r.raw;
  EXPECT_EQ(tail.find((scratch_ / "cache").string()), std::string::npos) << tail;
  if (get(*server_, "/toolchains").body["sandbox"]["mode"] == "bwrap") {
    EXPECT_NE(tail.find("HOME=/tmp TMPDIR=/tmp"), std::string::npos) << tail;
  }
}

// (7) Seeded mutations of every route's request: only 4xx or a legitimate 2xx, never a 5xx,
// and the server alive afterwards. KFORGE_MUTATION_SEED replays a run.
TEST_F(Hostile, MutatedRequestsNeverGive5xx) {
  const char* seed_env = std::getenv("KFORGE_MUTATION_SEED");
  const uint32_t seed = seed_env ? static_cast<uint32_t>(std::stoul(seed_env)) : 18u;
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const std::vector<json> values = {
      nullptr, true, false, 0, -1, 1, 3, INT64_MAX, INT64_MIN, UINT64_MAX, 1e308, -0.5, "", "wgmma", "float16",
      "native", "gemm", std::string(300, 'x'), json::array(), json::object(), json::array({json::array({1})}),
      json::array({"wgmma"}), json{{"op", "add"}, {"input", 9}}, int64_t{1} << 31, int64_t{1} << 33, int64_t{1} << 62};

  json autotune = gemm_request("cpu");
  autotune["choices"] = {{{"mr", 4}, {"nr", 8}, {"vec", 4}, {"mc", 32}, {"kc", 64}, {"nc", 128}, {"threads", 1}}};
  autotune["benchmark"] = {{"budget_ms", 1}};
  json render_cuda = gemm_request("cuda");
  render_cuda["params"] = {{"mma", "wgmma"}, {"block_m", 128}};
  json epilogue = gemm_request("cpu");
  epilogue["inputs"].push_back({{"name", "bias"}, {"dtype", "float32"}, {"sizes", {64}}});
  epilogue["epilogue"] = {{{"op", "add"}, {"input", 2}}, {{"op", "gelu"}, {"approximate", "tanh"}}, {{"op", "cast"}, {"dtype", "float16"}}};
  const std::vector<std::pair<std::string, json>> bases = {
      {"/render", gemm_request("cpu")}, {"/render", render_cuda}, {"/render", epilogue},
      {"/kernels", source_request("return 0;")}, {"/kernels", gemm_request("cpu")}, {"/autotune", autotune}};

  // Every node of a document, by pointer.
  std::function<void(const json&, const json::json_pointer&, std::vector<json::json_pointer>&)> nodes =
      [&](const json& j, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
        out.push_back(at);
        if (j.is_object()) {
          for (auto it = j.begin(); it != j.end(); ++it) nodes(it.value(), at / it.key(), out);
        } else if (j.is_array()) {
          for (size_t i = 0; i < j.size(); ++i) nodes(j[i], at / i, out);
        }
      };
  const std::vector<std::string> get_paths = {"/kernels/", "/kernels/%s/source", "/jobs/", "/templates/", "/jobs?limit=",
                                              "/kernels/%s/artifact"};
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  int sent = 0, ok2xx = 0;
  for (; sent < 1500 && Clock::now() < deadline; ++sent) {
    std::string route;
    std::string text;
    int status = 0;
    std::string body;
    if (sent % 8 == 7) {  // a URL with random bytes, percent-encoded or raw
      route = get_paths[pick(get_paths.size())];
      std::string junk;
      for (size_t i = 0, n = 1 + pick(70); i < n; ++i) {
        const unsigned char c = static_cast<unsigned char>(pick(256));
        if (pick(2) || c <= ' ' || c == 0x7f) {
          char hex[4];
          std::snprintf(hex, sizeof hex, "%%%02x", c);
          junk += hex;
        } else {
          junk += static_cast<char>(c);
        }
      }
      std::string path = route;
      if (auto at = path.find("%s"); at != std::string::npos) path.replace(at, 2, junk);
      else path += junk;
      text = "GET " + path;
      std::tie(status, body) = raw_http(*server_, text + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    } else {
      const auto& [r, base] = bases[pick(bases.size())];
      route = r;
      json doc = base;
      for (size_t m = 0, n = 1 + pick(3); m < n; ++m) {
        std::vector<json::json_pointer> ps;
        nodes(doc, json::json_pointer(), ps);
        const auto p = ps[pick(ps.size())];
        switch (pick(4)) {
          case 0:
          case 1:
            if (p.empty()) doc = values[pick(values.size())];
            else doc[p] = values[pick(values.size())];
            break;
          case 2:  // drop it
            if (!p.empty() && doc[p.parent_pointer()].is_object()) doc[p.parent_pointer()].erase(p.back());
            else if (!p.empty() && doc[p.parent_pointer()].is_array() && !doc[p.parent_pointer()].empty())
              doc[p.parent_pointer()].erase(doc[p.parent_pointer()].size() - 1);
            break;
          default:  // a field nobody knows, or a copy of another node in its place
            if (doc[p].is_object()) doc[p]["zz_unknown"] = 1;
            else if (!p.empty()) doc[p] = doc[ps[pick(ps.size())]];
        }
      }
      text = doc.dump();
      switch (pick(6)) {  // and sometimes the bytes themselves
        case 0:
          text[pick(text.size())] = static_cast<char>(0xff);
          break;
        case 1:
          text.resize(pick(text.size()));
          break;
        default:
          break;
      }
      std::tie(status, body) = raw_http(
          *server_, "POST " + route + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                        std::to_string(text.size()) + "\r\n\r\n" + text,
          120);
    }
    ASSERT_GE(status, 200) << "no answer (seed " << seed << ", #" << sent << ") " << route << ": " << text.substr(0, 2000);
    ASSERT_LT(status, 500) << "seed " << seed << ", #" << sent << " " << route << ": " << text.substr(0, 2000) << "\n-> " << body.substr(0, 2000);
    if (status < 300) ++ok2xx;
    if (route.front() == '/' && body.starts_with("{")) {
      ASSERT_TRUE(strict_json(body)) << route << ": " << body.substr(0, 2000);
    }
  }
  EXPECT_GE(sent, 100) << "too few mutations ran in the time bound";
  EXPECT_EQ(get(*server_, "/healthz").status, 200);
  EXPECT_TRUE(server_->alive());
  std::cerr << "mutations: " << sent << " sent, " << ok2xx << " answered 2xx (seed " << seed << ")\n";
}

}  // namespace
}  // namespace kforge::testing
