// Every kernel file of core/templates/ (docs/TEMPLATES.md, "Kernel files") compiles on its own
// — its sections with the standalone alternatives and macros, without rendering — to an object,
// by the compiler of its backend as kforge discovers it (Toolchains::discover): g++ for cpu,
// nvcc for cuda (sm_80; sm_90a for the wgmma kernel), hipcc for rocm (gfx90a; gfx1030 for the
// kernel's FMA path). Targets are always named, never the host's. Where nvcc or hipcc is
// missing (or lacks the target) a case skips with the reason, unless KFORGE_REQUIRE_BACKENDS
// names the backend. No GPU is needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "core/process/process.hpp"
#include "core/toolchain/toolchain.hpp"
#include "unit/scratch.hpp"

namespace fs = std::filesystem;
using namespace kforge;

namespace {

struct KernelFileCompile {
  std::string file;  // under core/templates/
  core::Backend backend;
  std::vector<std::string> targets;  // each must be one the compiler accepts
  std::vector<std::string> flags;    // language and target flags
};

void PrintTo(const KernelFileCompile& c, std::ostream* os) { *os << c.file << " (" << core::backend_name(c.backend) << ")"; }

const core::Toolchains& toolchains() {
  static const core::Toolchains t = core::Toolchains::discover();
  return t;
}

bool required(core::Backend b) {
  const char* req = std::getenv("KFORGE_REQUIRE_BACKENDS");
  return req && std::string(",").append(req).append(",").find("," + std::string(core::backend_name(b)) + ",") != std::string::npos;
}

const std::vector<std::string> kNvcc = {"-std=c++17", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC", "-x", "cu"};
const std::vector<std::string> kHipcc = {"-std=c++17", "-fPIC", "-x", "hip"};
const std::vector<std::string> kGxx = {"-std=c++17", "-O2", "-fPIC", "-fopenmp", "-x", "c++"};

std::vector<std::string> join(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
std::vector<std::string> gencode(const std::string& sm) { return {"-gencode", "arch=compute_" + sm + ",code=sm_" + sm}; }

const KernelFileCompile kCompiles[] = {
    {"prelude/cpu.inc", core::Backend::kCpu, {"x86-64-v3"}, join(kGxx, {"-march=x86-64-v3"})},
    {"prelude/cuda.cuh", core::Backend::kCuda, {"sm_80"}, join(kNvcc, gencode("80"))},
    {"prelude/rocm.hip", core::Backend::kRocm, {"gfx90a"}, join(kHipcc, {"--offload-arch=gfx90a"})},
    {"gemm/cpu.inc", core::Backend::kCpu, {"x86-64-v3"}, join(kGxx, {"-march=x86-64-v3"})},
    {"gemm/cpu.inc", core::Backend::kCpu, {"x86-64-v4"}, join(kGxx, {"-march=x86-64-v4"})},
    {"gemm/reference_cpu.inc", core::Backend::kCpu, {"x86-64-v3"}, join(kGxx, {"-march=x86-64-v3"})},
    {"gemm/gelu.cuh", core::Backend::kCuda, {"sm_80"}, join(kNvcc, gencode("80"))},
    {"gemm/mma_sync.cuh", core::Backend::kCuda, {"sm_80", "sm_90a"}, join(join(kNvcc, gencode("80")), gencode("90a"))},
    {"gemm/simt.cuh", core::Backend::kCuda, {"sm_80"}, join(kNvcc, gencode("80"))},
    {"gemm/wgmma.cuh", core::Backend::kCuda, {"sm_90a"}, join(kNvcc, gencode("90a"))},
    {"gemm/gemv.cuh", core::Backend::kCuda, {"sm_90a"}, join(kNvcc, gencode("90a"))},
    {"gemm/reference.cuh", core::Backend::kCuda, {"sm_80"}, join(kNvcc, gencode("80"))},
    {"gemm/reference.cuh", core::Backend::kRocm, {"gfx90a"}, join(kHipcc, {"--offload-arch=gfx90a"})},
    {"gemm/rocm.hip", core::Backend::kRocm, {"gfx90a", "gfx1030"}, join(kHipcc, {"--offload-arch=gfx90a", "--offload-arch=gfx1030"})},
};

class KernelFiles : public ::testing::TestWithParam<KernelFileCompile> {};

TEST_P(KernelFiles, CompileOnTheirOwn) {
  const KernelFileCompile& c = GetParam();
  const core::Toolchain& tc = toolchains().get(c.backend);
  std::string missing = tc.available ? "" : tc.reason;
  for (const auto& t : c.targets) {
    if (missing.empty() && c.backend != core::Backend::kCpu && std::find(tc.archs.begin(), tc.archs.end(), t) == tc.archs.end()) {
      missing = tc.compiler.string() + " does not accept " + t;
    }
  }
  if (!missing.empty()) {
    if (required(c.backend)) FAIL() << core::backend_name(c.backend) << " is required (KFORGE_REQUIRE_BACKENDS): " << missing;
    GTEST_SKIP() << missing;
  }
  kforge::testing::Scratch scratch;
  const fs::path source = fs::path(KFORGE_SOURCE_DIR) / "core" / "templates" / c.file;
  ASSERT_TRUE(fs::exists(source)) << source;
  core::ProcessSpec spec;
  spec.argv = {tc.compiler.string()};
  spec.argv.insert(spec.argv.end(), c.flags.begin(), c.flags.end());
  spec.argv.insert(spec.argv.end(), {"-c", source.string(), "-o", (scratch / "kernel.o").string()});
  spec.cwd = scratch.path();
  spec.env = {"PATH=" + tc.search_path, "HOME=" + scratch.path().string(), "TMPDIR=" + scratch.path().string()};
  spec.timeout = std::chrono::minutes(5);
  const auto r = core::run_process(spec);
  ASSERT_TRUE(r) << r.error().message;
  std::string cmd;
  for (const auto& a : spec.argv) cmd += (cmd.empty() ? "" : " ") + a;
  EXPECT_TRUE(r->ok()) << cmd << ": " << r->describe() << "\n" << r->output;
  const fs::path object = scratch / "kernel.o";
  EXPECT_TRUE(fs::exists(object) && fs::file_size(object) > 0) << cmd << ": no object";
}

INSTANTIATE_TEST_SUITE_P(Templates, KernelFiles, ::testing::ValuesIn(kCompiles), [](const auto& info) {
  std::string name = info.param.file + "_" + std::string(core::backend_name(info.param.backend)) + "_" + info.param.targets.front();
  for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
});

}  // namespace
