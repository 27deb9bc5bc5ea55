// Why did this miss (issue 16): each key input changed in turn on the real service, and the
// miss's reason names exactly that input; GET /kernels/{key}/why, POST /explain and
// `kforge explain` say the same.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/base/fsutil.hpp"
#include "core/process/process.hpp"
#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json gemm_request() {
  auto tensor = [](const char* name, int64_t rows, int64_t cols) {
    return json{{"name", name}, {"dtype", "float32"}, {"sizes", {rows, cols}}};
  };
  // Parameters that fit any x86-64-v3 (AVX2) target, so that the arch can change alone.
  return {{"backend", "cpu"},          {"arch", "x86-64-v3"},
          {"template", "gemm"},        {"params", {{"mr", 6}, {"nr", 16}, {"vec", 8}}},
          {"inputs", {tensor("A", 48, 32), tensor("B", 32, 40)}},
          {"output", tensor("C", 48, 40)}};
}

json source_request(const std::string& line) {
  return {{"backend", "cpu"},
          {"arch", "x86-64-v3"},
          {"source", "#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
                     "extern \"C\" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n,\n"
                     "                                     size_t* workspace_size, uint8_t* workspace, void* stream) {\n"
                     "  if (workspace_size) { *workspace_size = 0; return 0; }\n"
                     "  for (int64_t i = 0; i < n; ++i)\n" +
                         line +
                         "\n  return 0;\n}\n"}};
}

class Why : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(scratch_ / "cache", scratch_ / "server.log");
  }

  // POSTs a request that must be a compiled miss; returns its answer.
  json miss(const ServerProcess& s, const json& req) {
    auto r = post_json(s, "/kernels", req.dump());
    EXPECT_EQ(r.status, 200) << r.raw.substr(0, 2000);
    EXPECT_EQ(r.body.value("cache", ""), "miss") << r.raw.substr(0, 2000);
    return r.body;
  }

  // The one input a miss's reason names, checked against the nearest entry it names.
  static json only_reason(const json& answer, const std::string& nearest_key) {
    EXPECT_EQ(answer["miss_nearest"].value("key", ""), nearest_key) << answer["miss_reason"].dump(2);
    const json& reason = answer["miss_reason"];
    EXPECT_EQ(reason.size(), 1u) << reason.dump(2);
    return reason.empty() ? json::object() : reason[0];
  }

  Scratch scratch_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(Why, EachChangedInputIsNamedAloneWithWhatItWasAndIs) {
  json base = gemm_request();
  json first = miss(*server_, base);
  ASSERT_EQ(first["miss_reason"].size(), 1u);
  EXPECT_EQ(first["miss_reason"][0]["input"], "kernel") << "the family's first build says so";
  EXPECT_TRUE(first["miss_nearest"].is_null());
  const std::string key = first["key"];

  // One template parameter.
  json param = base;
  param["params"]["mr"] = 4;
  json r = only_reason(miss(*server_, param), key);
  EXPECT_EQ(r["input"], "params.mr");
  EXPECT_EQ(r["was"], 6);
  EXPECT_EQ(r["now"], 4);

  // The arch: its -march flag is the arch's, not a flag change; the source is not named.
  json arch = base;
  arch["arch"] = "haswell";
  r = only_reason(miss(*server_, arch), key);
  EXPECT_EQ(r["input"], "arch");
  EXPECT_EQ(r["was"], "x86-64-v3");
  EXPECT_EQ(r["now"], "haswell");

  // One flag.
  json flag = base;
  flag["options"] = {{"opt_level", "O2"}};
  r = only_reason(miss(*server_, flag), key);
  EXPECT_EQ(r["input"], "flags");
  EXPECT_EQ(r["was"], json::array({"-O3"}));
  EXPECT_EQ(r["now"], json::array({"-O2"}));

  // One tensor's size.
  json shape = base;
  shape["inputs"][1]["sizes"] = {32, 48};
  shape["output"]["sizes"] = {48, 48};
  json answer = miss(*server_, shape);
  std::vector<std::string> named;
  for (const auto& item : answer["miss_reason"]) named.push_back(item["input"]);
  EXPECT_EQ(named, (std::vector<std::string>{"inputs[1]", "output"})) << answer["miss_reason"].dump(2);
}

TEST_F(Why, OneSourceLineIsNamedWithAUnifiedDiff) {
  json a = miss(*server_, source_request("    y[i] = 2 * x[i];"));
  json b = miss(*server_, source_request("    y[i] = 3 * x[i];"));
  json r = only_reason(b, a["key"]);
  EXPECT_EQ(r["input"], "source");
  const std::string diff = r.value("diff", "");
  EXPECT_NE(diff.find("--- a/source.cpp"), std::string::npos) << diff;
  EXPECT_NE(diff.find("+++ b/source.cpp"), std::string::npos) << diff;
  EXPECT_NE(diff.find("\n-    y[i] = 2 * x[i];\n+    y[i] = 3 * x[i];\n"), std::string::npos) << diff;
  EXPECT_NE(diff.find("@@ -"), std::string::npos) << diff;
  EXPECT_EQ(diff.find("cpu_kernel_"), std::string::npos) << "kernel names differ by key; the diff shows KERNEL_NAME";

  // The same explanation for the stored key, from the entry itself.
  auto why = get(*server_, "/kernels/" + b["key"].get<std::string>() + "/why");
  ASSERT_EQ(why.status, 200) << why.raw;
  EXPECT_EQ(why.body["nearest"]["key"], a["key"]);
  EXPECT_EQ(why.body["miss_reason"], b["miss_reason"]);
  // The family's first entry has nothing before it.
  why = get(*server_, "/kernels/" + a["key"].get<std::string>() + "/why");
  ASSERT_EQ(why.status, 200) << why.raw;
  EXPECT_TRUE(why.body["nearest"].is_null()) << why.raw;
  EXPECT_EQ(why.body["miss_reason"][0]["input"], "kernel");
  EXPECT_EQ(get(*server_, "/kernels/" + std::string(64, '0') + "/why").status, 404);
  EXPECT_EQ(get(*server_, "/kernels/nothex/why").status, 400);
}

TEST_F(Why, ACompilerOfAnotherVersionIsNamed) {
  // The same g++, announcing itself as another release (as an upgrade would): a second
  // instance on the same cache directory.
  const fs::path fake = scratch_ / "g++-fake";
  ASSERT_TRUE(core::write_file(fake,
                               "#!/bin/sh\n"
                               "if [ \"$1\" = --version ]; then g++ --version | sed '1s/$/ (patched)/'; exit 0; fi\n"
                               "exec g++ \"$@\"\n"));
  fs::permissions(fake, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  json first = miss(*server_, gemm_request());
  ::setenv("KFORGE_CXX", fake.c_str(), 1);
  // The script lives in the scratch directory, which the sandbox does not show compilers.
  ServerProcess other(scratch_ / "cache", scratch_ / "server-b.log", {"--sandbox", "none"});
  ::unsetenv("KFORGE_CXX");
  json r = only_reason(miss(other, gemm_request()), first["key"]);
  EXPECT_EQ(r["input"], "compiler");
  EXPECT_EQ(r["now"].get<std::string>().find("(patched)") != std::string::npos, true) << r.dump();
  EXPECT_EQ(r["was"].get<std::string>().find("(patched)"), std::string::npos) << r.dump();
}

TEST_F(Why, ExplainSaysWhetherARequestWouldHitAndWhyNotWithoutCompiling) {
  json base = gemm_request();
  json built = miss(*server_, base);
  const double runs = metric(*server_, "kforge_compiler_runs_total");

  auto hit = post_json(*server_, "/explain", base.dump());
  ASSERT_EQ(hit.status, 200) << hit.raw;
  EXPECT_EQ(hit.body["cache"], "hit");
  EXPECT_EQ(hit.body["key"], built["key"]);
  EXPECT_TRUE(hit.body["miss_reason"].empty());

  json changed = base;
  changed["params"]["nr"] = 8;
  auto would = post_json(*server_, "/explain", changed.dump());
  ASSERT_EQ(would.status, 200) << would.raw;
  EXPECT_EQ(would.body["cache"], "miss");
  EXPECT_EQ(would.body["nearest"]["key"], built["key"]);
  ASSERT_EQ(would.body["miss_reason"].size(), 1u) << would.raw;
  EXPECT_EQ(would.body["miss_reason"][0]["input"], "params.nr");
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), runs) << "explaining compiles nothing";
  EXPECT_EQ(get(*server_, "/kernels/" + would.body["key"].get<std::string>()).status, 404);

  // A bad request is a 400 naming the field, as POST /kernels would answer.
  json bad = base;
  bad["params"]["mr"] = 5;
  auto refused = post_json(*server_, "/explain", bad.dump());
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.body["errors"][0]["field"], "/params/mr") << refused.raw;

  // The command line prints the same.
  ASSERT_TRUE(core::write_file(scratch_ / "req.json", changed.dump()));
  core::ProcessSpec spec;
  spec.argv = {KFORGE_BINARY, "explain", (scratch_ / "req.json").string(), "--server", server_->url()};
  spec.env = {"PATH=/usr/bin:/bin"};
  auto out = core::run_process(spec);
  ASSERT_TRUE(out && out->ok()) << (out ? out->output : out.error().message);
  EXPECT_NE(out->output.find("cache    miss"), std::string::npos) << out->output;
  EXPECT_NE(out->output.find("params.nr: was 16, now 8"), std::string::npos) << out->output;
  EXPECT_NE(out->output.find(built["key"].get<std::string>()), std::string::npos) << out->output;
}

}  // namespace
}  // namespace kforge::testing
