// What a person with curl meets (issue 40, item 5): each error answer says what to do
// next — the limit a 413 broke, the compiler's first error in a 422, a `type` URI that
// answers, `WWW-Authenticate` on a 401, a hint that names the mode of a misplaced field —
// and a dropped job event stream resumes with Last-Event-ID.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

#include "core/base/fsutil.hpp"
#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

using nlohmann::json;

std::string source_request(const std::string& body) {
  return json{{"backend", "cpu"},
              {"arch", "native"},
              {"source",
               "#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
               "extern \"C\" PT_EXPORT int KERNEL_NAME(float* y, size_t* workspace_size, uint8_t* workspace, void* "
               "stream) {\n  if (workspace_size) { *workspace_size = 0; return 0; }\n" +
                   body + "\n}\n"}}
      .dump();
}

struct Event {
  std::string id, event;
  json data;
};

std::vector<Event> parse_events(const std::string& text) {
  std::vector<Event> out;
  std::istringstream in(text);
  Event e;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) {
      if (!e.event.empty()) out.push_back(e);
      e = {};
    } else if (line.starts_with("id: ")) {
      e.id = line.substr(4);
    } else if (line.starts_with("event: ")) {
      e.event = line.substr(7);
    } else if (line.starts_with("data: ")) {
      e.data = json::parse(line.substr(6), nullptr, false);
    }
  }
  return out;
}

class Answers : public ::testing::Test {
 protected:
  Scratch scratch_;
  std::unique_ptr<ServerProcess> start(std::vector<std::string> args = {}) {
    return std::make_unique<ServerProcess>(scratch_ / "cache", scratch_ / "server.log", std::move(args));
  }
  // The whole event stream of a finished job (the server ends it after `end`).
  static std::string events(const ServerProcess& s, const std::string& id, const httplib::Headers& headers = {}) {
    auto c = s.client();
    std::string body;
    auto r = c.Get(("/jobs/" + id + "/events").c_str(), headers, [&](const char* d, size_t n) {
      body.append(d, n);
      return true;
    });
    EXPECT_TRUE(r);
    if (r) {
      EXPECT_EQ(r->status, 200) << body;
    }
    return body;
  }
};

TEST_F(Answers, TooLargeStatesTheLimit) {
  auto s = start({"--max-body", "10000"});
  Reply r = post_json(*s, "/kernels", std::string(20000, ' '));
  ASSERT_EQ(r.status, 413) << r.raw;
  EXPECT_NE(r.body.value("detail", "").find("10000 bytes (--max-body)"), std::string::npos) << r.raw;
  EXPECT_EQ(r.body.value("max_bytes", 0), 10000) << r.raw;
}

TEST_F(Answers, CompileErrorDetailQuotesTheFirstCompilerError) {
  auto s = start();
  const std::string bad = source_request("  y[0] = 1  // no semicolon\n  return 0;");
  for (const char* cache : {"miss", "hit"}) {
    Reply r = post_json(*s, "/kernels", bad);
    ASSERT_EQ(r.status, 422) << r.raw;
    EXPECT_EQ(r.body.value("cache", ""), cache);
    const std::string detail = r.body.value("detail", "");
    EXPECT_NE(detail.find("source.cpp:"), std::string::npos) << cache << ": " << detail;
    EXPECT_NE(detail.find("error: expected ';'"), std::string::npos) << cache << ": " << detail;
  }
}

TEST_F(Answers, EveryProblemTypeUriAnswers) {
  auto s = start();
  std::vector<std::string> types;
  for (const auto& [method, path, body] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"GET", "/kernels/" + std::string(64, 'a'), ""},
           {"GET", "/kernels/nothex", ""},
           {"POST", "/kernels", source_request("  y[0] = 1\n  return 0;")},
           {"GET", "/nowhere", ""}}) {
    Reply r = method == "GET" ? get(*s, path) : post_json(*s, "/kernels", body);
    ASSERT_TRUE(r.body.contains("type")) << r.raw;
    types.push_back(r.body["type"]);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"/problems/not-found", "/problems/bad-request", "/problems/compile-failed",
                                             "/problems/not-found"}));
  types.push_back("/problems/compile-timeout");
  for (const auto& type : types) {
    Reply doc = get(*s, type);
    ASSERT_EQ(doc.status, 200) << type << ": " << doc.raw;
    EXPECT_EQ(doc.body.value("type", ""), type);
    EXPECT_FALSE(doc.body.value("description", "").empty()) << doc.raw;
  }
  Reply none = get(*s, "/problems/no-such-thing");
  EXPECT_EQ(none.status, 404) << none.raw;
  EXPECT_NE(none.raw.find("compile-failed"), std::string::npos) << "the 404 lists the known types: " << none.raw;
}

TEST_F(Answers, UnauthorizedSaysHowToAuthenticate) {
  ASSERT_TRUE(core::write_file_atomic(scratch_ / "tokens", "read:read-token-0123456789\n"));
  auto s = start({"--token-file", (scratch_ / "tokens").string()});
  auto c = s->client();
  for (const char* path : {"/jobs", "/status", "/kernels/" "0000000000000000000000000000000000000000000000000000000000000000"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer realm=\"kforge\"") << path;
  }
}

TEST_F(Answers, UnknownFieldHintNamesTheModeOfAMisplacedField) {
  auto s = start();
  const json tensor = {{"name", "a"}, {"dtype", "float32"}, {"sizes", {8, 8}}};
  // `templat`: a template request whose mode key is misspelt reads as source mode.
  Reply r = post_json(*s, "/kernels", json{{"backend", "cpu"}, {"templat", "gemm"}, {"inputs", {tensor}}}.dump());
  ASSERT_EQ(r.status, 400) << r.raw;
  std::map<std::string, std::string> by_field;
  for (const auto& e : r.body["errors"]) by_field[e["field"]] = e["message"];
  EXPECT_NE(by_field["/inputs"].find("template-mode field"), std::string::npos) << r.raw;
  EXPECT_NE(by_field["/templat"].find("template mode: backend, arch, template"), std::string::npos) << r.raw;
  // And a template request with a field of neither mode lists the template fields first.
  r = post_json(*s, "/kernels", json{{"backend", "cpu"}, {"template", "gemm"}, {"inputs", {tensor, tensor}},
                                     {"output", tensor}, {"export_name", "f"}, {"colour", 1}}.dump());
  ASSERT_EQ(r.status, 400) << r.raw;
  by_field.clear();
  for (const auto& e : r.body["errors"]) by_field[e["field"]] = e["message"];
  EXPECT_NE(by_field["/export_name"].find("source-mode field"), std::string::npos) << r.raw;
  EXPECT_TRUE(by_field["/colour"].starts_with("unknown field `colour` (template mode: ")) << r.raw;
}

// Every event carries the job's version as its id; a stream resumed with Last-Event-ID
// sends only what came after it, and a finished job's `end` alone to one that saw its
// last state.
TEST_F(Answers, JobEventsCarryIdsAndResumeWithLastEventId) {
  auto s = start();
  auto c = s->client();
  auto posted = c.Post("/kernels", {{"Prefer", "respond-async"}}, source_request("  y[0] = 7;\n  return 0;"),
                       "application/json");
  ASSERT_TRUE(posted);
  ASSERT_EQ(posted->status, 202) << posted->body;
  const std::string id = json::parse(posted->body)["id"];

  const auto all = parse_events(events(*s, id));
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all.back().event, "end");
  uint64_t previous = 0;
  for (const auto& e : all) {
    ASSERT_FALSE(e.id.empty()) << e.event;
    if (e.event == "state") {
      EXPECT_GT(std::stoull(e.id), previous);
      previous = std::stoull(e.id);
    }
  }
  const std::string last = all.back().id;
  EXPECT_EQ(all[all.size() - 2].id, last);  // the last state and the end: one version

  const auto end_only = parse_events(events(*s, id, {{"Last-Event-ID", last}}));
  ASSERT_EQ(end_only.size(), 1u);
  EXPECT_EQ(end_only[0].event, "end");
  EXPECT_EQ(end_only[0].data.value("state", ""), "done");

  const auto resumed = parse_events(events(*s, id, {{"Last-Event-ID", all.front().id}}));
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed[0].event, "state");
  EXPECT_GT(std::stoull(resumed[0].id), std::stoull(all.front().id));

  Reply bad = get(*s, "/jobs/" + id + "/events", {{"Last-Event-ID", "yesterday"}});
  EXPECT_EQ(bad.status, 400) << bad.raw;
  EXPECT_NE(bad.raw.find("/Last-Event-ID"), std::string::npos) << bad.raw;
}

// GET /kernels lists what the cache holds, hits included (they are not jobs), newest
// first, filtered and paged: what the status page's Kernels view shows.
TEST_F(Answers, KernelsAreListedFilteredAndPaged) {
  auto s = start();
  const std::string ok = source_request("  y[0] = 1;\n  return 0;");
  Reply a = post_json(*s, "/kernels", ok);
  ASSERT_EQ(a.status, 200) << a.raw;
  ASSERT_EQ(post_json(*s, "/kernels", ok).body.value("cache", ""), "hit");
  Reply bad = post_json(*s, "/kernels", source_request("  y[0] = 1\n  return 0;"));
  ASSERT_EQ(bad.status, 422) << bad.raw;
  auto tensor = [](const char* name) { return json{{"name", name}, {"dtype", "float32"}, {"sizes", {8, 8}}}; };
  Reply gemm = post_json(*s, "/kernels", json{{"backend", "cpu"}, {"template", "gemm"}, {"inputs", {tensor("a"), tensor("b")}},
                                              {"output", tensor("c")}}.dump());
  ASSERT_EQ(gemm.status, 200) << gemm.raw;

  auto keys = [&](const std::string& query) {
    Reply r = get(*s, "/kernels" + query);
    EXPECT_EQ(r.status, 200) << query << ": " << r.raw;
    std::vector<std::string> out;
    for (const auto& k : r.body["kernels"]) out.push_back(k["key"]);
    return out;
  };
  const std::string ka = a.body["key"], kbad = bad.body["key"], kgemm = gemm.body["key"];
  EXPECT_EQ(keys("").size(), 3u);
  EXPECT_EQ(keys("?template=gemm"), std::vector<std::string>{kgemm});
  EXPECT_EQ(keys("?status=failed"), std::vector<std::string>{kbad});
  EXPECT_EQ(keys("?prefix=" + ka.substr(0, 8)), std::vector<std::string>{ka});
  EXPECT_EQ(keys("?name=" + a.body["kernel_name"].get<std::string>().substr(4)), std::vector<std::string>{ka});
  EXPECT_EQ(keys("?template=&status=ok"), std::vector<std::string>{ka});
  EXPECT_TRUE(keys("?backend=cuda").empty());
  Reply page = get(*s, "/kernels?limit=2");
  ASSERT_EQ(page.body["kernels"].size(), 2u) << page.raw;
  EXPECT_EQ(page.body["total"], 3);
  const auto& first = page.body["kernels"][0];
  EXPECT_EQ(first["url"], "/kernels/" + first["key"].get<std::string>());
  for (const char* field : {"kernel_name", "backend", "archs", "template", "status", "created_at", "bytes"})
    EXPECT_TRUE(first.contains(field)) << field;
  ASSERT_TRUE(page.body["next"].is_string()) << page.raw;
  Reply rest = get(*s, "/kernels?limit=2&cursor=" + page.body["next"].get<std::string>());
  ASSERT_EQ(rest.body["kernels"].size(), 1u) << rest.raw;
  EXPECT_TRUE(rest.body["next"].is_null());
  for (const auto& [query, field] : std::vector<std::pair<std::string, std::string>>{
           {"?limit=0", "/limit"}, {"?limit=-1", "/limit"}, {"?backend=tpu", "/backend"}, {"?prefix=XYZ", "/prefix"},
           {"?status=maybe", "/status"}, {"?cursor=abc", "/cursor"}, {"?colour=red", "/colour"}}) {
    Reply r = get(*s, "/kernels" + query);
    EXPECT_EQ(r.status, 400) << query << ": " << r.raw;
    EXPECT_NE(r.raw.find("\"" + field + "\""), std::string::npos) << query << ": " << r.raw;
  }
}

}  // namespace
}  // namespace kforge::testing
