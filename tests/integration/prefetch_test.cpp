// POST /prefetch and `kforge prefetch` (issue 16) over real HTTP: per-entry outcomes, the
// job's events, validation of the whole list before anything runs, the queue's limits, and
// the command line.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "core/base/fsutil.hpp"
#include "core/process/process.hpp"
#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A cpu kernel y = x + salt (distinct per salt, so a cold build); `broken` leaves out a
// semicolon: a compile error.
json cpu_kernel(int salt, bool broken = false) {
  return {{"backend", "cpu"},
          {"arch", "native"},
          {"source",
           "#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
           "extern \"C\" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, "
           "uint8_t* workspace, void* stream) {\n  if (workspace_size) { *workspace_size = 0; return 0; }\n"
           "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] + " +
               std::to_string(salt) + (broken ? "\n" : ";\n") + "  return 0;\n}\n"}};
}

// Keeps g++'s constant evaluator busy for about `loops` x 0.1 s.
json slow_kernel(int salt, int loops) {
  return {{"backend", "cpu"},
          {"arch", "native"},
          {"source",
           "#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
           "constexpr uint64_t burn(uint64_t x) {\n  for (int i = 0; i < " +
               std::to_string(loops) +
               "; ++i)\n    for (int j = 0; j < 50000; ++j) x = x * 6364136223846793005ull + 1442695040888963407ull;\n"
               "  return x;\n}\nconstexpr uint64_t kBurnt = burn(" +
               std::to_string(salt) +
               ");\nextern \"C\" PT_EXPORT int KERNEL_NAME(float* y, size_t* workspace_size, uint8_t* workspace, "
               "void* stream) {\n  if (workspace_size) { *workspace_size = 0; return 0; }\n  y[0] = float(kBurnt & "
               "0xff);\n  return 0;\n}\n"}};
}

struct Event {
  std::string name;
  json data;
};

// GET /jobs/{id}/events until the `end` event (reconnecting, as EventSource does, if a
// stream ends before it).
std::vector<Event> follow(const ServerProcess& s, const std::string& id) {
  std::vector<Event> events;
  for (int attempt = 0; attempt < 3 && (events.empty() || events.back().name != "end"); ++attempt) {
    auto c = s.client();
    c.set_read_timeout(300);
    std::string buffer;
    c.Get("/jobs/" + id + "/events", [&](const char* data, size_t n) {
      buffer.append(data, n);
      for (size_t cut; (cut = buffer.find("\n\n")) != std::string::npos;) {
        const std::string frame = buffer.substr(0, cut);
        buffer.erase(0, cut + 2);
        Event e;
        std::istringstream in(frame);
        for (std::string line; std::getline(in, line);) {
          if (line.starts_with("event: ")) e.name = line.substr(7);
          if (line.starts_with("data: ")) e.data = json::parse(line.substr(6), nullptr, false);
        }
        if (!e.name.empty()) events.push_back(e);
        if (e.name == "end") return false;
      }
      return true;
    });
  }
  return events;
}

Reply post(const ServerProcess& s, const std::string& path, const json& body,
           std::string* location = nullptr) {
  auto c = s.client();
  auto r = c.Post(path, body.dump(), "application/json");
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.raw = r->body;
  out.body = json::parse(r->body, nullptr, false);
  if (location) *location = r->get_header_value("Location");
  return out;
}

// Runs `kforge prefetch` and returns (exit code, stdout+stderr).
std::pair<int, std::string> prefetch_cli(const Scratch& scratch, const ServerProcess& s, const fs::path& file) {
  core::ProcessSpec spec;
  spec.argv = {KFORGE_BINARY, "prefetch", file.string(), "--server", s.url()};
  spec.cwd = scratch.path();
  spec.env = {"PATH=/usr/bin:/bin"};
  auto out = core::run_process(spec);
  if (!out) return {-1, out.error().message};
  return {out->term_signal ? -1 : out->exit_code, out->output};
}

class Prefetch : public ::testing::Test {
 protected:
  std::unique_ptr<ServerProcess> start(std::vector<std::string> args = {}) {
    return std::make_unique<ServerProcess>(scratch_ / "cache",
                                           scratch_ / ("server." + std::to_string(n_++) + ".log"),
                                           std::move(args));
  }
  Scratch scratch_;
  int n_ = 0;
};

TEST_F(Prefetch, ReportsHitBuiltAndFailedPerEntryAndWarmsTheCache) {
  auto s = start({"--compile-jobs", "2"});
  for (int salt : {1, 2}) ASSERT_EQ(post(*s, "/kernels", cpu_kernel(salt)).status, 200);
  const double runs0 = metric(*s, "kforge_compiler_runs_total");

  json requests = {cpu_kernel(1), cpu_kernel(2), cpu_kernel(3), cpu_kernel(4), cpu_kernel(5, true),
                   slow_kernel(6, 20)};
  requests[4]["label"] = "the broken one";
  requests[2]["wait_ms"] = 5;  // as a client records it: accepted, ignored
  std::string location;
  Reply accepted = post(*s, "/prefetch", {{"format", "kforge-prefetch/1"}, {"label", "model-a"}, {"requests", requests}},
                        &location);
  ASSERT_EQ(accepted.status, 202) << accepted.raw;
  EXPECT_EQ(accepted.body["kind"], "prefetch");
  EXPECT_EQ(accepted.body["label"], "model-a");
  EXPECT_EQ(accepted.body["prefetch"]["total"], 6);
  const std::string id = accepted.body["id"];
  EXPECT_EQ(location, "/jobs/" + id);

  const auto events = follow(*s, id);
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back().name, "end");
  // Progress: `done` never goes back, some event shows the run part-way, and every entry
  // is in the `recent` of some event or in the result.
  int64_t last_done = 0;
  bool partway = false;
  std::set<int64_t> seen;
  for (const auto& e : events) {
    const json& p = e.data["prefetch"];
    ASSERT_TRUE(p.is_object()) << e.data.dump();
    EXPECT_GE(p["done"].get<int64_t>(), last_done);
    last_done = p["done"];
    partway = partway || (last_done > 0 && last_done < 6);
    EXPECT_LE(p["in_flight"].get<int64_t>(), 2) << "at most --compile-jobs builds in flight";
    for (const auto& r : p["recent"]) seen.insert(r["index"].get<int64_t>());
  }
  EXPECT_TRUE(partway) << "no event showed the prefetch part-way";
  EXPECT_GE(seen.size(), 1u);

  const json job = events.back().data;
  EXPECT_EQ(job["state"], "done");
  EXPECT_EQ(job["http_status"], 200);
  const json& result = job["result"];
  EXPECT_EQ(result["total"], 6);
  EXPECT_EQ(result["done"], 6);
  EXPECT_EQ(result["hit"], 2);
  EXPECT_EQ(result["built"], 3);
  EXPECT_EQ(result["failed"], 1);
  ASSERT_EQ(result["entries"].size(), 6u);
  const std::vector<std::string> outcomes = {"hit", "hit", "built", "built", "failed", "built"};
  for (size_t i = 0; i < 6; ++i) {
    const json& e = result["entries"][i];
    EXPECT_EQ(e["index"], i);
    EXPECT_EQ(e["outcome"], outcomes[i]) << e.dump();
    EXPECT_EQ(e["key"].get<std::string>().size(), 64u) << e.dump();
  }
  const json& broken = result["entries"][4];
  EXPECT_EQ(broken["label"], "the broken one");
  EXPECT_EQ(broken["error"]["status"], 422) << broken.dump();
  EXPECT_NE(broken["error"]["log"].get<std::string>().find("error"), std::string::npos) << broken.dump();
  EXPECT_EQ(metric(*s, "kforge_compiler_runs_total") - runs0, 4.0);  // 3 built, 1 failed

  // The builds were jobs of the prefetch, on the queue; the same requests are hits now.
  auto jobs = get(*s, "/jobs");
  int children = 0;
  for (const auto& j : jobs.body["jobs"]) children += j.value("prefetch_job", "") == id;
  EXPECT_EQ(children, 4);
  for (int i = 0; i < 6; ++i) {
    json req = requests[i];
    req.erase("label");
    Reply again = post(*s, "/kernels", req);
    if (i == 4) {
      EXPECT_EQ(again.status, 422);
      EXPECT_EQ(again.body["cache"], "hit");
    } else {
      EXPECT_EQ(again.status, 200) << again.raw;
      EXPECT_EQ(again.body["cache"], "hit");
      EXPECT_EQ(again.body["key"], result["entries"][i]["key"]);
    }
  }
  EXPECT_EQ(metric(*s, "kforge_compiler_runs_total") - runs0, 4.0);

  // A second prefetch of the same list: all hits but the cached compile error.
  Reply warm = post(*s, "/prefetch", {{"requests", requests}, {"wait_ms", 60000}});
  ASSERT_EQ(warm.status, 200) << warm.raw;
  EXPECT_EQ(warm.body["result"]["hit"], 5);
  EXPECT_EQ(warm.body["result"]["failed"], 1);
  EXPECT_EQ(warm.body["result"]["entries"][4]["cache"], "hit");
}

TEST_F(Prefetch, MalformedListsAre400NamingTheFieldAndRunNothing) {
  auto s = start({"--max-prefetch", "3"});
  const double runs0 = metric(*s, "kforge_compiler_runs_total");
  struct Case {
    json body;
    std::string field;
  };
  json unknown = cpu_kernel(1);
  unknown["bogus"] = 1;
  json bad_arch = cpu_kernel(2);
  bad_arch["arch"] = "not-a-cpu";
  const json bad_param = json::parse(R"({"backend": "cpu", "template": "no-such-template",
    "inputs": [{"name": "a", "dtype": "float32", "sizes": [64, 64]}, {"name": "b", "dtype": "float32", "sizes": [64, 64]}],
    "output": {"name": "c", "dtype": "float32", "sizes": [64, 64]}})");
  const std::vector<Case> cases = {
      {{{"requests", {cpu_kernel(1), unknown}}}, "/requests/1/bogus"},
      {{{"requests", {bad_arch}}}, "/requests/0/arch"},
      {{{"requests", {cpu_kernel(1), cpu_kernel(2), bad_param}}}, "/requests/2/template"},
      {{{"requests", {cpu_kernel(1), 7}}}, "/requests/1"},
      {{{"requests", {{{"backend", "cpu"}, {"source", "no kernel here"}, {"label", 5}}}}}, "/requests/0/label"},
      {{{"requests", json::array()}}, "/requests"},
      {{{"requests", {cpu_kernel(1), cpu_kernel(2), cpu_kernel(3), cpu_kernel(4)}}}, "/requests"},
      {{{"requests", "all of them"}}, "/requests"},
      {{{"format", "kforge-prefetch/9"}, {"requests", {cpu_kernel(1)}}}, "/format"},
      {{{"requests", {cpu_kernel(1)}}, {"extra", true}}, "/extra"},
      {{{"requests", {cpu_kernel(1)}}, {"wait_ms", -1}}, "/wait_ms"},
  };
  for (const auto& c : cases) {
    Reply r = post(*s, "/prefetch", c.body);
    ASSERT_EQ(r.status, 400) << c.field << ": " << r.raw;
    ASSERT_FALSE(r.body["errors"].empty()) << r.raw;
    EXPECT_EQ(r.body["errors"][0]["field"], c.field) << r.raw;
  }
  EXPECT_EQ(post(*s, "/prefetch", json::array()).status, 400);
  EXPECT_EQ(metric(*s, "kforge_compiler_runs_total"), runs0);
  EXPECT_TRUE(get(*s, "/jobs").body["jobs"].empty()) << "a refused prefetch is no job";
  EXPECT_EQ(get(*s, "/healthz").status, 200);
}

TEST_F(Prefetch, WaitsForRoomInASmallQueueInsteadOfBeingRefused) {
  auto s = start({"--compile-jobs", "1", "--max-queue", "1"});
  json requests = json::array();
  for (int i = 0; i < 8; ++i) requests.push_back(cpu_kernel(100 + i));
  Reply accepted = post(*s, "/prefetch", {{"requests", requests}});
  ASSERT_EQ(accepted.status, 202) << accepted.raw;
  const auto events = follow(*s, accepted.body["id"]);
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back().name, "end");
  for (const auto& e : events) EXPECT_LE(e.data["prefetch"]["in_flight"].get<int>(), 1);
  const json& result = events.back().data["result"];
  EXPECT_EQ(result["built"], 8) << result.dump();
  EXPECT_EQ(result["failed"], 0) << result.dump();
  EXPECT_EQ(metric(*s, "kforge_compiler_runs_total"), 8.0);
}

TEST_F(Prefetch, CommandLineReadsJsonLinesDrawsLinesAndSummarizes) {
  auto s = start({"--compile-jobs", "2"});
  ASSERT_EQ(post(*s, "/kernels", cpu_kernel(11)).status, 200);
  json broken = cpu_kernel(13, true);
  broken["label"] = "broken-kernel";
  const std::string lines = cpu_kernel(11).dump() + "\n" + cpu_kernel(12).dump() + "\n\n" + broken.dump() + "\n";
  ASSERT_TRUE(core::write_file(scratch_ / "model.jsonl", lines));
  auto [code, out] = prefetch_cli(scratch_, *s, scratch_ / "model.jsonl");
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("3/3 requests in"), std::string::npos) << out;
  EXPECT_NE(out.find("1 hit, 1 built, 1 failed"), std::string::npos) << out;
  EXPECT_NE(out.find("failed #2 broken-kernel: "), std::string::npos) << out;
  EXPECT_NE(out.find("1/3 hit #0 cpu_kernel_"), std::string::npos) << out;  // a line per entry (no TTY)
  EXPECT_NE(out.find(" built #1 cpu_kernel_"), std::string::npos) << out;
  EXPECT_EQ(out.find("null"), std::string::npos) << out;
  // Again: the broken one is a cached compile error now, an entry without a kernel name.
  std::tie(code, out) = prefetch_cli(scratch_, *s, scratch_ / "model.jsonl");
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("/3 failed #2 broken-kernel\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("null"), std::string::npos) << out;
  EXPECT_NE(out.find("error"), std::string::npos) << out;  // the compiler's message

  // A manifest (as the Python client writes one) of what now is cached: all hits, exit 0.
  json manifest = {{"format", "kforge-prefetch/1"},
                   {"recorded", {{"by", "test"}}},
                   {"requests", {cpu_kernel(11), cpu_kernel(12)}}};
  ASSERT_TRUE(core::write_file(scratch_ / "manifest.json", manifest.dump(2)));
  std::tie(code, out) = prefetch_cli(scratch_, *s, scratch_ / "manifest.json");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("2 hit, 0 built, 0 failed"), std::string::npos) << out;

  // A malformed line is refused before anything is sent.
  ASSERT_TRUE(core::write_file(scratch_ / "bad.jsonl", cpu_kernel(11).dump() + "\nnot json\n"));
  std::tie(code, out) = prefetch_cli(scratch_, *s, scratch_ / "bad.jsonl");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("bad.jsonl:2"), std::string::npos) << out;
}

TEST_F(Prefetch, StopsCleanlyWhenTheServiceStopsMidway) {
  auto s = start({"--compile-jobs", "1"});
  json requests = {slow_kernel(21, 20), slow_kernel(22, 20), slow_kernel(23, 20)};
  Reply accepted = post(*s, "/prefetch", {{"requests", requests}});
  ASSERT_EQ(accepted.status, 202) << accepted.raw;
  const std::string id = accepted.body["id"];
  // Wait (on the job's events) until its first build is in flight, then stop the service.
  auto c = s->client();
  std::string buffer;
  c.Get("/jobs/" + id + "/events", [&](const char* data, size_t n) {
    buffer.append(data, n);
    return buffer.find("\"in_flight\":1") == std::string::npos;
  });
  ASSERT_NE(buffer.find("\"in_flight\":1"), std::string::npos) << buffer;
  const auto t0 = std::chrono::steady_clock::now();
  s.reset();  // SIGTERM, and waits for the process
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  const std::string log = core::read_file(scratch_ / "server.0.log").value_or("");
  EXPECT_NE(log.find("stopping"), std::string::npos) << log;
  EXPECT_EQ(log.find("terminate"), std::string::npos) << log;
}

}  // namespace
}  // namespace kforge::testing
