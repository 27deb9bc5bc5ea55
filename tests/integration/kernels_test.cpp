// Integration tests: the real `kforge serve` over real HTTP, with the real compilers.
// CUDA and ROCm cases skip when the toolchain is missing, unless KFORGE_REQUIRE_BACKENDS
// names the backend, in which case they fail.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "core/toolchain/codeobj.hpp"
#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"
#include "core/process/process.hpp"
#include "core/base/abi.hpp"
#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kCpuSource = R"(#include <cstddef>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
extern "C" PT_EXPORT int KERNEL_NAME(const float* x, const float* b, float* y, int64_t n, float alpha,
                                     size_t* workspace_size, uint8_t* workspace, void* stream) {
  if (workspace_size) { *workspace_size = n * sizeof(float); return 0; }
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i] + b[i];
  return 0;
}
)";

const char* kCudaSource = R"(#include <cuda_runtime.h>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
__global__ void axpy(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 2.0f * x[i];
}
extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int n, size_t* workspace_size,
                                     uint8_t* workspace, cudaStream_t stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  axpy<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)";

const char* kHipSource = R"(#include <hip/hip_runtime.h>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
__global__ void axpy(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 2.0f * x[i];
}
extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int n, size_t* workspace_size,
                                     uint8_t* workspace, hipStream_t stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  hipLaunchKernelGGL(axpy, dim3((n + 255) / 256), dim3(256), 0, stream, x, y, n);
  return hipGetLastError() == hipSuccess ? 0 : 1;
}
)";

// Burns a few seconds of g++'s constant evaluator (under its default ops limit), so a
// test can kill the server while the compiler is running.
const char* kSlowCpuSource = R"(#include <cstddef>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
constexpr uint64_t burn(uint64_t x) {
  for (int i = 0; i < 30; ++i)
    for (int j = 0; j < 50000; ++j) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}
constexpr uint64_t kBurnt = burn(1);
extern "C" PT_EXPORT int KERNEL_NAME(float* y, size_t* workspace_size, uint8_t* workspace, void* stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  y[0] = static_cast<float>(kBurnt & 0xff);
  return 0;
}
)";

std::string request(const std::string& backend, const json& arch, const std::string& source,
                    const json& options = json::object()) {
  json j = {{"backend", backend}, {"arch", arch}, {"source", source}};
  if (!options.empty()) j["options"] = options;
  return j.dump();
}

size_t cache_entries(const fs::path& cache) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& shard : fs::directory_iterator(cache / "v1" / "objects", ec)) {
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(shard.path())) ++n;
  }
  return n;
}

class Kernels : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(cache(), scratch_ / "server.log");
  }
  fs::path cache() const { return scratch_ / "cache"; }

  // True when the backend can compile here; otherwise skips, or fails when
  // KFORGE_REQUIRE_BACKENDS names it.
  bool backend_ready(const std::string& backend) {
    auto t = get(*server_, "/toolchains");
    if (t.body[backend].value("available", false)) return true;
    const char* req = std::getenv("KFORGE_REQUIRE_BACKENDS");
    std::string reason = t.body[backend].value("reason", "");
    if (req &&
        std::string(",").append(req).append(",").find("," + backend + ",") != std::string::npos) {
      ADD_FAILURE() << backend
                    << " is required (KFORGE_REQUIRE_BACKENDS) but unavailable: " << reason;
    } else {
      skip(backend + " unavailable: " + reason);
    }
    return false;
  }

  static void skip(const std::string& why) { GTEST_SKIP() << why; }

  fs::path download(const std::string& url, const std::string& name) {
    auto r = get(*server_, url);
    EXPECT_EQ(r.status, 200) << url;
    fs::path p = scratch_ / name;
    EXPECT_TRUE(core::write_file(p, r.raw));
    return p;
  }

  // The defined symbols of a shared object (dynamic) or a relocatable object.
  std::string exported_symbols(const fs::path& so, bool dynamic = true) {
    core::ProcessSpec spec;
    spec.argv = {core::find_program("nm", "/usr/bin:/bin").string(), dynamic ? "-D" : "-g", "--defined-only",
                 so.string()};
    spec.cwd = "/";
    spec.env = {"PATH=/usr/bin:/bin"};
    auto r = core::run_process(spec);
    EXPECT_TRUE(r && r->ok());
    return r ? r->output : "";
  }

  Scratch scratch_;
  std::unique_ptr<ServerProcess> server_;
};

// What lies in the staging area besides each process's own directory and lock file.
size_t staging_items(const fs::path& tmp) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(tmp)) {
    if (!e.path().filename().string().starts_with("proc.")) {
      ++n;
      continue;
    }
    for (const auto& f : fs::directory_iterator(e.path())) n += f.path().filename() != ".lock";
  }
  return n;
}

TEST_F(Kernels, CpuKernelCompilesLoadsAndComputes) {
  auto r = post_json(*server_, "/kernels", request("cpu", "native", kCpuSource));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["cache"], "miss");
  const std::string key = r.body["key"];
  const std::string name = r.body["kernel_name"];
  EXPECT_TRUE(core::is_hex_key(key));
  EXPECT_EQ(name, "cpu_kernel_" + key.substr(0, 12));
  EXPECT_EQ(r.body["abi"]["symbol"], name);
  EXPECT_EQ(r.body["abi"]["args"].size(), 8u);
  EXPECT_EQ(r.body["abi"]["args"][4]["ctype"], "float");
  for (const char* phase : {"validate", "lookup", "render", "compile", "publish", "total"}) {
    EXPECT_TRUE(r.body["phases_ms"].contains(phase)) << phase;
  }
  EXPECT_NE(r.body["wrapper"]["python"].get<std::string>().find(name), std::string::npos);
  EXPECT_NE(r.body["wrapper"]["cpp"].get<std::string>().find(name + "("), std::string::npos);

  fs::path so = download(r.body["artifact"]["url"], "k.so");
  EXPECT_EQ(core::sha256_file(so).value(), r.body["artifact"]["sha256"]);
  // Never unloaded: libgomp worker threads outlive the call, and dlclose would pull their code
  // away.
  void* h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  ASSERT_NE(h, nullptr) << ::dlerror();
  using Fn = int (*)(const float*, const float*, float*, int64_t, float, size_t*, uint8_t*, void*);
  auto fn = reinterpret_cast<Fn>(::dlsym(h, name.c_str()));
  ASSERT_NE(fn, nullptr);
  const int64_t n = 1000;
  size_t ws = 0;
  EXPECT_EQ(fn(nullptr, nullptr, nullptr, n, 0.f, &ws, nullptr, nullptr), 0);
  EXPECT_EQ(ws, n * sizeof(float));
  std::vector<float> x(n), b(n), y(n, -1.f);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::sin(static_cast<float>(i));
    b[i] = static_cast<float>(i) * 0.5f;
  }
  EXPECT_EQ(fn(x.data(), b.data(), y.data(), n, 1.5f, nullptr, nullptr, nullptr), 0);
  for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], 1.5f * x[i] + b[i]) << i;

  auto source = get(*server_, "/kernels/" + key + "/source");
  EXPECT_EQ(source.status, 200);
  EXPECT_NE(source.raw.find("int " + name + "("), std::string::npos);
  EXPECT_EQ(source.raw.find("KERNEL_NAME"), std::string::npos);
  auto log = get(*server_, "/kernels/" + key + "/log");
  EXPECT_EQ(log.status, 200);
  EXPECT_NE(log.raw.find("$ /"), std::string::npos);  // the command line heads the log
  auto manifest = get(*server_, "/kernels/" + key);
  EXPECT_EQ(manifest.status, 200);
  EXPECT_EQ(manifest.body["artifact"], r.body["artifact"]);
}

TEST_F(Kernels, SecondIdenticalRequestIsAHitAndRunsNoCompiler) {
  auto first = post_json(*server_, "/kernels", request("cpu", "native", kCpuSource));
  ASSERT_EQ(first.status, 200) << first.raw;
  const double runs = metric(*server_, "kforge_compiler_runs_total");
  EXPECT_EQ(runs, 1);
  auto second = post_json(*server_, "/kernels", request("cpu", "native", kCpuSource));
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(second.body["cache"], "hit");
  EXPECT_EQ(second.body["key"], first.body["key"]);
  EXPECT_EQ(second.body["artifact"], first.body["artifact"]);
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), runs);
  // A different spelling of the same source (trailing whitespace) is the same kernel.
  auto third =
      post_json(*server_, "/kernels", request("cpu", "native", std::string(kCpuSource) + "\n\n"));
  EXPECT_EQ(third.body["cache"], "hit");
  EXPECT_EQ(third.body["key"], first.body["key"]);
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), runs);
}

TEST_F(Kernels, CacheOutlivesTheProcess) {
  auto first = post_json(*server_, "/kernels", request("cpu", "native", kCpuSource));
  ASSERT_EQ(first.status, 200);
  server_.reset();
  server_ = std::make_unique<ServerProcess>(cache(), scratch_ / "server2.log");
  auto again = post_json(*server_, "/kernels", request("cpu", "native", kCpuSource));
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.body["cache"], "hit");
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), 0);
}

TEST_F(Kernels, ArtifactEtagAndConditionalGet) {
  auto r = post_json(*server_, "/kernels", request("cpu", "native", kCpuSource));
  ASSERT_EQ(r.status, 200);
  const std::string url = r.body["artifact"]["url"];
  auto c = server_->client();
  auto full = c.Get(url);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->get_header_value("ETag"),
            "\"" + r.body["artifact"]["sha256"].get<std::string>() + "\"");
  auto cond = c.Get(url, {{"If-None-Match", full->get_header_value("ETag")}});
  ASSERT_TRUE(cond);
  EXPECT_EQ(cond->status, 304);
  EXPECT_TRUE(cond->body.empty());
}

TEST_F(Kernels, AotAlsoBuildsARelocatableObject) {
  auto r = post_json(*server_, "/kernels", request("cpu", "native", kCpuSource, {{"aot", true}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_TRUE(r.body.contains("object"));
  EXPECT_EQ(r.body["compile"]["steps"].size(), 2u);
  fs::path o = download(r.body["object"]["url"], "k.o");
  EXPECT_EQ(core::elf_type(o).value(), 1);  // ET_REL
  fs::path so = download(r.body["artifact"]["url"], "k.so");
  EXPECT_EQ(core::elf_type(so).value(), 3);  // ET_DYN
  EXPECT_NE(exported_symbols(so).find(r.body["kernel_name"].get<std::string>()), std::string::npos);
  // Without aot there is no object to serve.
  auto plain = post_json(*server_, "/kernels", request("cpu", "native", kCpuSource));
  EXPECT_NE(plain.body["key"], r.body["key"]);
  EXPECT_EQ(get(*server_, "/kernels/" + plain.body["key"].get<std::string>() + "/object").status,
            404);
}

TEST_F(Kernels, CudaSourceForSm80AndSm90) {
  if (!backend_ready("cuda")) return;
  auto r = post_json(*server_, "/kernels", request("cuda", {"sm_80", "sm_90"}, kCudaSource));
  ASSERT_EQ(r.status, 200) << r.raw;
  const std::string name = r.body["kernel_name"];
  EXPECT_TRUE(name.starts_with("cuda_kernel_"));
  fs::path so = download(r.body["artifact"]["url"], "k.so");
  EXPECT_NE(exported_symbols(so).find(" T " + name), std::string::npos);
  EXPECT_NE(r.body["wrapper"]["python"].get<std::string>().find("SYMBOL = \"" + name + "\""),
            std::string::npos);
  EXPECT_NE(r.body["wrapper"]["cpp"].get<std::string>().find("cudaStream_t stream"),
            std::string::npos);
  auto objects = core::list_code_objects(so).value();
  std::set<std::string> cubins;
  for (const auto& o : objects) {
    if (o.kind == "cubin") cubins.insert(o.arch);
  }
  EXPECT_TRUE(cubins.contains("sm_80") && cubins.contains("sm_90"));
  EXPECT_EQ(r.body["code_objects"], core::to_json(objects));
  // ptxas -v resource usage, per arch.
  std::set<std::string> archs;
  for (const auto& u : r.body["compile"]["resources"]) {
    archs.insert(u["arch"].get<std::string>());
    EXPECT_GT(u["registers"].get<int>(), 0);
  }
  EXPECT_EQ(archs, (std::set<std::string>{"sm_80", "sm_90"}));
}

TEST_F(Kernels, HipSourceForGfx90aAndGfx1030) {
  if (!backend_ready("rocm")) return;
  auto r = post_json(*server_, "/kernels", request("rocm", {"gfx90a", "gfx1030"}, kHipSource));
  ASSERT_EQ(r.status, 200) << r.raw;
  const std::string name = r.body["kernel_name"];
  fs::path so = download(r.body["artifact"]["url"], "k.so");
  EXPECT_NE(exported_symbols(so).find(" T " + name), std::string::npos);
  std::set<std::string> archs;
  const auto objects = core::list_code_objects(so).value();
  for (const auto& o : objects) archs.insert(o.arch);
  EXPECT_EQ(archs, (std::set<std::string>{"gfx90a", "gfx1030"}));
  // Cross-check with LLVM's own bundler where Debian ships it.
  fs::path bundler = core::find_program("clang-offload-bundler",
                                        "/usr/lib/llvm-15/bin:/usr/lib/llvm-14/bin:/usr/bin");
  fs::path objcopy = core::find_program("objcopy", "/usr/bin:/bin");
  if (!bundler.empty() && !objcopy.empty()) {
    core::ProcessSpec dump;
    dump.argv = {objcopy.string(), "--dump-section", ".hip_fatbin=" + (scratch_ / "fb").string(), so.string()};
    dump.cwd = "/";
    dump.env = {"PATH=/usr/bin:/bin"};
    ASSERT_TRUE(core::run_process(dump)->ok());
    core::ProcessSpec list = dump;
    list.argv = {bundler.string(), "--list", "--type=o", "--input=" + (scratch_ / "fb").string()};
    auto out = core::run_process(list);
    ASSERT_TRUE(out && out->ok());
    EXPECT_NE(out->output.find("amdgcn-amd-amdhsa--gfx90a"), std::string::npos) << out->output;
    EXPECT_NE(out->output.find("amdgcn-amd-amdhsa--gfx1030"), std::string::npos) << out->output;
  }
  std::set<std::string> res_archs;
  for (const auto& u : r.body["compile"]["resources"]) res_archs.insert(u.value("arch", ""));
  EXPECT_EQ(res_archs, (std::set<std::string>{"gfx90a", "gfx1030"}));
}

// Only what this hipcc can build is offered: each listed target has its device library, and
// one that the LLVM knows but the device libraries lack (gfx1100 with Debian 12's hipcc 5.2) is
// a 400 naming the missing library, answered before any compiler runs, never a 422 after one.
TEST_F(Kernels, RocmOffersOnlyTargetsWithTheirDeviceLibrary) {
  if (!backend_ready("rocm")) return;
  const json rocm = get(*server_, "/toolchains").body["rocm"];
  const fs::path libs = rocm["device_libs"].get<std::string>();
  ASSERT_FALSE(libs.empty()) << rocm.dump();
  EXPECT_FALSE(rocm["release"].get<std::string>().empty()) << rocm.dump();
  bool split = false;  // device libraries with one ISA-version file per target
  for (const auto& e : fs::directory_iterator(libs)) split |= e.path().filename().string().starts_with("oclc_isa_version_");
  for (const auto& arch : rocm["archs"]) {
    const std::string a = arch;
    EXPECT_TRUE(a.starts_with("gfx") && a.size() > 4) << a;  // a processor, not a feature (gfx9, gfx10)
    if (split) {
      EXPECT_TRUE(fs::exists(libs / ("oclc_isa_version_" + a.substr(3) + ".bc"))) << a << " is offered without its device library";
    }
  }
  if (!rocm["unbuildable"].contains("gfx1100")) GTEST_SKIP() << "this hipcc builds gfx1100 (" << rocm["release"] << ")";
  EXPECT_FALSE(std::count(rocm["archs"].begin(), rocm["archs"].end(), "gfx1100"));
  const double runs = metric(*server_, "kforge_compiler_runs_total");
  auto r = post_json(*server_, "/kernels", request("rocm", {"gfx90a", "gfx1100"}, kHipSource));
  ASSERT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["errors"][0]["field"], "/arch/1") << r.raw;
  const std::string detail = r.body["detail"];
  EXPECT_NE(detail.find("cannot be built"), std::string::npos) << detail;
  EXPECT_NE(detail.find("oclc_isa_version_1100.bc"), std::string::npos) << detail;
  EXPECT_NE(detail.find(libs.string()), std::string::npos) << detail;
  EXPECT_TRUE(r.body["accepted_archs"].is_array());
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), runs);
  EXPECT_EQ(cache_entries(cache()), 0u);
}

TEST_F(Kernels, CompileErrorIs422WithLogAndIsCachedNegatively) {
  std::string bad = std::string(kCpuSource) + "\nint broken( { }\n";
  auto r = post_json(*server_, "/kernels", request("cpu", "native", bad));
  ASSERT_EQ(r.status, 422) << r.raw;
  EXPECT_EQ(r.content_type, "application/problem+json");
  EXPECT_TRUE(r.body["argv"].is_array());
  EXPECT_NE(r.body["log"].get<std::string>().find("error"), std::string::npos);
  EXPECT_EQ(r.body["cache"], "miss");
  const double runs = metric(*server_, "kforge_compiler_runs_total");
  auto again = post_json(*server_, "/kernels", request("cpu", "native", bad));
  EXPECT_EQ(again.status, 422);
  EXPECT_EQ(again.body["cache"], "hit");
  EXPECT_EQ(again.body["log"], r.body["log"]);
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), runs);
  auto log = get(*server_, "/kernels/" + r.body["key"].get<std::string>() + "/log");
  EXPECT_EQ(log.status, 200);
  EXPECT_EQ(get(*server_, "/kernels/" + r.body["key"].get<std::string>() + "/artifact").status,
            404);
}

TEST_F(Kernels, BadInputsAre4xxNamingTheFieldAndLeaveTheCacheAlone) {
  struct Case {
    std::string body;
    int status;
    std::string field;
  };
  std::string huge(5 << 20, 'x');
  const std::vector<Case> cases = {
      {"{\"backend\": ", 400, ""},
      {request("tpu", "native", kCpuSource), 400, "/backend"},
      {request("cpu", "pentium-9000", kCpuSource), 400, "/arch"},
      {request("cpu", "native", "int f() { return 0; }"), 400, "/source"},
      {request("cpu", "native", "// KERNEL_NAME\nint f();"), 400, "/source"},
      {json{{"backend", "cpu"}, {"source", kCpuSource}, {"flags", "-fplugin=evil.so"}}.dump(), 400,
       "/flags"},
      {json{{"backend", "cpu"}, {"source", kCpuSource}, {"options", {{"include_dirs", {"/etc"}}}}}
           .dump(),
       400, "/options/include_dirs"},
      {request("cpu", "native", huge), 413, ""},
  };
  for (const auto& c : cases) {
    auto r = post_json(*server_, "/kernels", c.body);
    EXPECT_EQ(r.status, c.status) << c.body.substr(0, 200) << "\n" << r.raw;
    EXPECT_EQ(r.content_type, "application/problem+json") << c.body.substr(0, 200);
    if (!c.field.empty()) {
      bool named = false;
      for (const auto& e : r.body["errors"]) named |= e["field"] == c.field;
      EXPECT_TRUE(named) << "expected field " << c.field << " in " << r.raw;
    }
  }
  auto arch = post_json(*server_, "/kernels", request("cpu", "pentium-9000", kCpuSource));
  EXPECT_NE(arch.body["detail"].get<std::string>().find("x86-64"),
            std::string::npos);  // lists accepted archs
  EXPECT_TRUE(arch.body["accepted_archs"].is_array());
  for (const std::string& path :
       {std::string("/kernels/abc"), std::string("/kernels/..%2F..%2Fetc%2Fpasswd"),
        "/kernels/" + std::string(64, 'A') + "/artifact", std::string("/kernels/zz/log")}) {
    auto r = get(*server_, path);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_EQ(r.body["errors"][0]["field"], "/key") << path;
  }
  EXPECT_EQ(get(*server_, "/kernels/" + std::string(64, 'a')).status, 404);
  EXPECT_EQ(get(*server_, "/no/such/route").status, 404);
  EXPECT_EQ(cache_entries(cache()), 0u);
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), 0);
  EXPECT_EQ(get(*server_, "/healthz").status, 200);
}

TEST_F(Kernels, SigkillMidCompileLeavesNoHalfEntry) {
  const std::string body = request("cpu", "native", kSlowCpuSource);
  std::thread client([&] { post_json(*server_, "/kernels", body); });
  // Wait until the compile is under way: a staging directory exists.
  const fs::path tmp = cache() / "v1" / "tmp";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (staging_items(tmp) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(staging_items(tmp), 0u) << "the compile never started";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the compiler get going
  server_->kill9();
  client.join();
  EXPECT_EQ(cache_entries(cache()), 0u);
  EXPECT_GT(staging_items(tmp), 0u);  // garbage left behind, never visible as an entry

  server_ = std::make_unique<ServerProcess>(cache(), scratch_ / "server2.log");
  EXPECT_EQ(staging_items(tmp), 0u);  // the dead process's staging is cleared at start
  auto r = post_json(*server_, "/kernels", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["cache"], "miss");
  EXPECT_EQ(cache_entries(cache()), 1u);
}

TEST_F(Kernels, PythonWrapperRunsUnderCtypesWithNumpy) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "/usr/bin/python3 missing";
  auto r = post_json(*server_, "/kernels", request("cpu", "native", kCpuSource));
  ASSERT_EQ(r.status, 200);
  const std::string name = r.body["kernel_name"];
  download(r.body["artifact"]["url"], name + ".so");
  // Named apart from the .so: Python would import `<name>.so` as an extension module.
  ASSERT_TRUE(core::write_file(scratch_ / (name + "_wrapper.py"),
                               r.body["wrapper"]["python"].get<std::string>()));
  std::string script = "import sys\nsys.path.insert(0, '" + scratch_.path().string() + "')\n" +
                       "import numpy as np\nimport " + name + "_wrapper as w\n" + R"(
rng = np.random.default_rng(0)
x = rng.standard_normal(4099).astype(np.float32)
b = rng.standard_normal(4099).astype(np.float32)
y = np.zeros(4099, np.float32)
assert w.)" + name + R"(_workspace_size(4099, 0.0) == 4099 * 4
w.run(x, b, y, 4099, -0.75)  # numpy arrays as they are: the wrapper reads __array_interface__
ref = -0.75 * x.astype(np.float64) + b
err = np.abs(y - ref).max()
assert err < 1e-5, err
print("wrapper ok, max abs err", err)
)";
  ASSERT_TRUE(core::write_file(scratch_ / "drive.py", script));
  core::ProcessSpec spec;
  spec.argv = {"/usr/bin/python3", (scratch_ / "drive.py").string()};
  spec.cwd = scratch_.path();
  spec.env = {"PATH=/usr/bin:/bin"};
  auto out = core::run_process(spec);
  ASSERT_TRUE(out);
  EXPECT_TRUE(out->ok()) << out->output;
  EXPECT_NE(out->output.find("wrapper ok"), std::string::npos) << out->output;
}

TEST_F(Kernels, ToolchainsAndHealth) {
  auto t = get(*server_, "/toolchains");
  ASSERT_EQ(t.status, 200);
  for (const char* b : {"cpu", "cuda", "rocm"}) {
    ASSERT_TRUE(t.body.contains(b));
    if (t.body[b]["available"]) {
      EXPECT_EQ(t.body[b]["identity"].get<std::string>().size(), 64u);
      EXPECT_FALSE(t.body[b]["archs"].empty());
    } else {
      EXPECT_EQ(t.body[b]["status"], "unavailable");
      EXPECT_FALSE(t.body[b]["reason"].get<std::string>().empty());
    }
  }
  EXPECT_TRUE(t.body["cpu"]["available"]);
  auto h = get(*server_, "/healthz");
  EXPECT_EQ(h.body["status"], "ok");
  auto spec = get(*server_, "/openapi.json");
  EXPECT_EQ(spec.body["openapi"], "3.1.0");
}

TEST_F(Kernels, SubmitCliWritesArtifactSourceAndWrappers) {
  ASSERT_TRUE(core::write_file(scratch_ / "req.json", request("cpu", "native", kCpuSource)));
  core::ProcessSpec spec;
  spec.argv = {KFORGE_BINARY, "submit", (scratch_ / "req.json").string(), "--server", server_->url(), "--out", (scratch_ / "out").string()};
  spec.cwd = scratch_.path();
  spec.env = {"PATH=/usr/bin:/bin"};
  auto out = core::run_process(spec);
  ASSERT_TRUE(out);
  ASSERT_TRUE(out->ok()) << out->output;
  EXPECT_NE(out->output.find("cache    miss"), std::string::npos) << out->output;
  std::string name;
  for (const auto& e : fs::directory_iterator(scratch_ / "out")) {
    if (e.path().extension() == ".so") name = e.path().stem();
  }
  ASSERT_FALSE(name.empty());
  for (const char* ext : {".so", ".cpp", "_wrapper.py", ".h", ".json"}) {
    EXPECT_TRUE(fs::exists(scratch_ / "out" / (name + ext))) << ext;
  }
}

}  // namespace
}  // namespace kforge::testing

namespace kforge::testing {
namespace {

// Inductor's CUTLASS sources export `cutlass_<hash>` instead of KERNEL_NAME, then the same
// body again as `cutlass_fused_mm_<hash>` for the final kernel.
std::string named(const std::string& name) {
  return core::replace_identifier(kCpuSource, "KERNEL_NAME", name);
}

json named_request(const std::string& name) {
  return {{"backend", "cpu"}, {"arch", "x86-64"}, {"source", named(name)}, {"export_name", name}};
}

using KernelFn = int (*)(const float*, const float*, float*, int64_t, float, size_t*, uint8_t*, void*);

// Loads `so` and checks that `name` computes y = alpha x + b.
void expect_axpb(const fs::path& so, const std::string& name) {
  void* h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  ASSERT_NE(h, nullptr) << ::dlerror();
  auto fn = reinterpret_cast<KernelFn>(::dlsym(h, name.c_str()));
  ASSERT_NE(fn, nullptr) << name << " is not exported by " << so;
  std::vector<float> x{1, 2, 3}, b{10, 20, 30}, y(3);
  EXPECT_EQ(fn(x.data(), b.data(), y.data(), 3, 2.f, nullptr, nullptr, nullptr), 0);
  EXPECT_EQ(y, (std::vector<float>{12, 24, 36}));
}

TEST_F(Kernels, ExportNameIsKeptAndARenameLinksWithoutCompiling) {
  auto first = post_json(*server_, "/kernels", named_request("cutlass_ed44ddb9").dump());
  ASSERT_EQ(first.status, 200) << first.raw;
  EXPECT_EQ(first.body["cache"], "miss");
  EXPECT_EQ(first.body["kernel_name"], "cutlass_ed44ddb9");
  EXPECT_EQ(first.body["abi"]["symbol"], "cutlass_ed44ddb9");
  ASSERT_TRUE(first.body.contains("object"));  // export_name implies aot: Inductor wants the .o
  const std::string kernel_key = first.body["export"]["of"];
  EXPECT_NE(first.body["key"], kernel_key);
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), 2);  // compile + link

  fs::path so = download(first.body["artifact"]["url"], "first.so");
  expect_axpb(so, "cutlass_ed44ddb9");
  fs::path o = download(first.body["object"]["url"], "first.o");
  EXPECT_EQ(core::elf_type(o).value(), 1);
  EXPECT_NE(exported_symbols(so).find("cutlass_ed44ddb9"), std::string::npos);
  auto src = get(*server_, "/kernels/" + first.body["key"].get<std::string>() + "/source");
  EXPECT_EQ(src.raw, named("cutlass_ed44ddb9"));

  // Inductor renames the final kernel: same body, another name. No compiler runs.
  auto renamed = post_json(*server_, "/kernels", named_request("cutlass_fused_mm_ed44ddb9").dump());
  ASSERT_EQ(renamed.status, 200) << renamed.raw;
  EXPECT_EQ(renamed.body["cache"], "renamed");
  EXPECT_EQ(renamed.body["export"]["of"], kernel_key);
  EXPECT_EQ(renamed.body["kernel_name"], "cutlass_fused_mm_ed44ddb9");
  EXPECT_EQ(renamed.body["export"]["steps"].size(), 2u);  // objcopy, link
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), 2);
  expect_axpb(download(renamed.body["artifact"]["url"], "renamed.so"), "cutlass_fused_mm_ed44ddb9");
  auto o2 = download(renamed.body["object"]["url"], "renamed.o");
  EXPECT_NE(exported_symbols(o2, false).find("cutlass_fused_mm_ed44ddb9"), std::string::npos);

  // Asked again: a hit on the request key; with the placeholder: the kernel itself.
  auto again = post_json(*server_, "/kernels", named_request("cutlass_fused_mm_ed44ddb9").dump());
  EXPECT_EQ(again.body["cache"], "hit");
  EXPECT_EQ(again.body["key"], renamed.body["key"]);
  json placeholder = {{"backend", "cpu"}, {"arch", "x86-64"}, {"source", kCpuSource}, {"options", {{"aot", true}}}};
  auto plain = post_json(*server_, "/kernels", placeholder.dump());
  EXPECT_EQ(plain.body["cache"], "hit");
  EXPECT_EQ(plain.body["key"], kernel_key);
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), 2);
}

TEST_F(Kernels, ExportNameErrorsNameTheField) {
  json bad = named_request("cutlass_x");
  bad["export_name"] = "not an identifier";
  auto r = post_json(*server_, "/kernels", bad.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["errors"][0]["field"], "/export_name");
  bad["export_name"] = "cutlass_y";  // the source never names it
  r = post_json(*server_, "/kernels", bad.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["errors"][0]["field"], "/export_name");
  EXPECT_NE(r.body["detail"].get<std::string>().find("never names"), std::string::npos);
  json both = named_request("cutlass_x");
  both["source"] = both["source"].get<std::string>() + "\nextern \"C\" int KERNEL_NAME_user();\nint z = KERNEL_NAME;\n";
  r = post_json(*server_, "/kernels", both.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["errors"][0]["field"], "/export_name");
  // A compile error under one name is the cached error under every name.
  json broken = named_request("cutlass_b1");
  broken["source"] = broken["source"].get<std::string>() + "\n#error broken\n";
  EXPECT_EQ(post_json(*server_, "/kernels", broken.dump()).status, 422);
  broken["source"] = core::replace_identifier(broken["source"].get<std::string>(), "cutlass_b1", "cutlass_b2");
  broken["export_name"] = "cutlass_b2";
  r = post_json(*server_, "/kernels", broken.dump());
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.body["cache"], "hit");
}

// A header library: a relative include and a define, checked by what the kernel computes.
const char* kLibSource = R"(#include <cstddef>
#include <cstdint>
#include "kf/scale.h"
#define PT_EXPORT __attribute__((visibility("default")))
extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, void* stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  for (int64_t i = 0; i < n; ++i) y[i] = KF_SCALE * x[i] + KF_OFFSET;
  return 0;
}
)";

fs::path make_library(const fs::path& root, int scale) {
  fs::create_directories(root / "include" / "kf");
  std::ofstream(root / "include" / "kf" / "scale.h") << "#define KF_SCALE " << scale << "\n";
  return root;
}

float run_lib_kernel(const fs::path& so, const std::string& name, float x) {
  void* h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(h, nullptr) << ::dlerror();
  if (!h) return NAN;
  using Fn = int (*)(const float*, float*, int64_t, size_t*, uint8_t*, void*);
  auto fn = reinterpret_cast<Fn>(::dlsym(h, name.c_str()));
  float y = NAN;
  if (fn) {
    EXPECT_EQ(fn(&x, &y, 1, nullptr, nullptr, nullptr), 0);
  }
  ::dlclose(h);
  return y;
}

TEST_F(Kernels, HeaderLibrariesAndDefinesReachTheCompilerAndTheKey) {
  // Two copies of one library at different paths, and a library with other contents.
  make_library(scratch_ / "a" / "kflib", 3);
  make_library(scratch_ / "b" / "kflib", 3);
  make_library(scratch_ / "c" / "kflib", 5);
  json req = {{"backend", "cpu"}, {"arch", "x86-64"}, {"source", kLibSource},
              {"options", {{"includes", {"kflib/include"}}, {"defines", {{"KF_OFFSET", 7}, {"KF_UNUSED", nullptr}}}}}};
  auto key_with = [&](const fs::path& lib, const std::string& tag, float* y) {
    server_.reset();
    server_ = std::make_unique<ServerProcess>(scratch_ / ("cache-" + tag), scratch_ / ("server-" + tag + ".log"),
                                              std::vector<std::string>{"--library", "kflib=" + lib.string()});
    auto r = post_json(*server_, "/kernels", req.dump());
    EXPECT_EQ(r.status, 200) << r.raw;
    if (r.status != 200) return std::string();
    *y = run_lib_kernel(download(r.body["artifact"]["url"], tag + ".so"), r.body["kernel_name"], 2.f);
    auto libs = get(*server_, "/toolchains").body["libraries"];
    EXPECT_EQ(libs.size(), 1u);
    EXPECT_EQ(libs[0]["name"], "kflib");
    EXPECT_EQ(libs[0]["files"], 1);
    return r.body["key"].get<std::string>();
  };
  float ya = 0, yb = 0, yc = 0;
  const std::string ka = key_with(scratch_ / "a" / "kflib", "a", &ya);
  const std::string kb = key_with(scratch_ / "b" / "kflib", "b", &yb);
  const std::string kc = key_with(scratch_ / "c" / "kflib", "c", &yc);
  EXPECT_EQ(ya, 3 * 2 + 7);
  EXPECT_EQ(yb, ya);
  EXPECT_EQ(yc, 5 * 2 + 7);
  EXPECT_EQ(ka, kb) << "the same library at another path is the same kernel";
  EXPECT_NE(ka, kc) << "another library's contents are another kernel";
  auto log = get(*server_, "/kernels/" + kc + "/log");
  EXPECT_NE(log.raw.find("-DKF_OFFSET=7"), std::string::npos);
  EXPECT_NE(log.raw.find("-DKF_UNUSED "), std::string::npos);

  // What a request may not do with them.
  auto field_of = [&](json options) {
    json r = req;
    r["options"] = std::move(options);
    auto a = post_json(*server_, "/kernels", r.dump());
    EXPECT_EQ(a.status, 400) << a.raw;
    return a.body["errors"][0].value("field", "");
  };
  EXPECT_EQ(field_of({{"includes", {"nolib/include"}}}), "/options/includes/0");
  EXPECT_EQ(field_of({{"includes", {"kflib/../../etc"}}}), "/options/includes/0");
  EXPECT_EQ(field_of({{"includes", {"kflib//etc"}}}), "/options/includes/0");
  EXPECT_EQ(field_of({{"includes", {"kflib/include", "kflib/missing"}}}), "/options/includes/1");
  EXPECT_EQ(field_of({{"includes", "kflib"}}), "/options/includes");
  EXPECT_EQ(field_of({{"defines", {{"A B", 1}}}}), "/options/defines/A B");
  EXPECT_EQ(field_of({{"defines", {{"X", "1 -fplugin=evil.so"}}}}), "/options/defines/X");
  EXPECT_EQ(field_of({{"defines", {{"X", 1.5}}}}), "/options/defines/X");
  EXPECT_EQ(field_of({{"defines", json::array()}}), "/options/defines");
}

TEST_F(Kernels, BigBodyLabelledAsAFormIsReadAsJson) {
  // `curl -d @req.json` and Python's urllib label a body application/x-www-form-urlencoded;
  // httplib alone would refuse such a body past 8 KiB with 413.
  std::string padding(20000, ' ');
  std::string body = request("cpu", "x86-64", std::string(kCpuSource) + "//" + padding + "\n");
  auto res = server_->client().Post("/kernels", body, "application/x-www-form-urlencoded");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

}  // namespace
}  // namespace kforge::testing
