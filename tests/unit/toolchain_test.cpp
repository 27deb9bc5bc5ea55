#include "core/toolchain.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/build.hpp"

namespace kforge::core {
namespace {

Toolchain fake(Backend b, std::vector<std::string> archs, std::optional<std::string> native) {
  Toolchain tc;
  tc.backend = b;
  tc.available = true;
  tc.compiler = b == Backend::kCpu    ? "/usr/bin/g++"
                : b == Backend::kCuda ? "/cuda/bin/nvcc"
                                      : "/usr/bin/hipcc";
  tc.version_text = "v1";
  tc.archs = std::move(archs);
  tc.native = std::move(native);
  tc.native_reason = "no device here";
  return tc;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Toolchain, ResolvesNativeAndChecksArchs) {
  auto cuda = fake(Backend::kCuda, {"sm_80", "sm_90", "sm_90a"}, "sm_90");
  EXPECT_EQ(cuda.resolve_archs({"native", "sm_80"}, "/arch").value(),
            (std::vector<std::string>{"sm_90", "sm_80"}));
  auto bad = cuda.resolve_archs({"sm_80", "sm_13"}, "/arch");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().fields.at(0).field, "/arch/1");
  EXPECT_EQ(bad.error().extra["accepted_archs"].size(), 3u);
  EXPECT_NE(bad.error().message.find("sm_90a"), std::string::npos);
  EXPECT_FALSE(cuda.resolve_archs({"sm_80", "sm_80"}, "/arch"));
  auto no_native = fake(Backend::kCuda, {"sm_80"}, std::nullopt).resolve_archs({"native"}, "/arch");
  ASSERT_FALSE(no_native);
  EXPECT_NE(no_native.error().message.find("no device here"), std::string::npos);
}

TEST(Toolchain, CudaNativeIsTheArchSpecificTargetWhereThereIsOne) {
  const std::vector<std::string> archs = {"sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_100a"};
  EXPECT_EQ(cuda_native_arch("9.0", archs), "sm_90a");
  EXPECT_EQ(cuda_native_arch("10.0", archs), "sm_100a");
  EXPECT_EQ(cuda_native_arch("8.6", archs), "sm_86");
  EXPECT_EQ(cuda_native_arch("9.0", {"sm_80", "sm_90"}), "sm_90");  // an nvcc without sm_90a
}

TEST(Toolchain, RocmTargetIdFeatures) {
  auto rocm = fake(Backend::kRocm, {"gfx90a", "gfx1030"}, std::nullopt);
  EXPECT_TRUE(rocm.resolve_archs({"gfx90a:xnack-", "gfx1030"}, "/arch"));
  EXPECT_FALSE(rocm.resolve_archs({"gfx90a:fast+"}, "/arch"));
}

TEST(Toolchain, CpuTakesOneArch) {
  auto cpu = fake(Backend::kCpu, {"x86-64", "x86-64-v3"}, "x86-64-v3");
  EXPECT_FALSE(cpu.resolve_archs({"x86-64", "x86-64-v3"}, "/arch"));
  EXPECT_EQ(cpu.resolve_archs({"native"}, "/arch").value(), std::vector<std::string>{"x86-64-v3"});
}

TEST(Toolchain, CompileStepsPerBackend) {
  CompileOptions o;
  auto cuda = fake(Backend::kCuda, {"sm_80", "sm_90"}, std::nullopt)
                  .compile_steps({"sm_80", "sm_90"}, o, "source.cu");
  ASSERT_EQ(cuda.size(), 1u);
  const auto& a = cuda[0].argv;
  EXPECT_EQ(a[0], "/cuda/bin/nvcc");
  EXPECT_TRUE(has(a, "arch=compute_80,code=[sm_80,compute_80]"));
  EXPECT_TRUE(has(a, "arch=compute_90,code=[sm_90,compute_90]"));
  EXPECT_TRUE(has(a, "-shared") && has(a, "-Xptxas") && has(a, "-v"));
  EXPECT_EQ(cuda[0].output, "kernel.so");

  o.aot = true;
  o.fast_math = true;
  auto rocm =
      fake(Backend::kRocm, {"gfx90a"}, std::nullopt).compile_steps({"gfx90a"}, o, "source.hip");
  ASSERT_EQ(rocm.size(), 2u);
  EXPECT_TRUE(has(rocm[0].argv, "-c") && has(rocm[0].argv, "--offload-arch=gfx90a"));
  EXPECT_TRUE(has(rocm[0].argv, "-ffast-math"));
  EXPECT_TRUE(has(rocm[0].argv, "-Rpass-analysis=kernel-resource-usage"));
  EXPECT_EQ(rocm[0].output, "kernel.o");
  EXPECT_TRUE(has(rocm[1].argv, "kernel.o") && has(rocm[1].argv, "-shared"));
}

TEST(Toolchain, KeyDependsOnEverythingThatChangesTheArtifact) {
  auto tc = fake(Backend::kCpu, {"x86-64", "x86-64-v3"}, std::nullopt);
  CompileOptions o;
  auto key = [&](const std::string& arch, const CompileOptions& opt, const std::string& src) {
    return kernel_key(
        {Backend::kCpu, {arch}, &tc, tc.compile_steps({arch}, opt, "source.cpp"), src});
  };
  const std::string base = key("x86-64", o, "int KERNEL_NAME();");
  EXPECT_EQ(base, key("x86-64", o, "\n int KERNEL_NAME();  \n"));  // stripped
  EXPECT_NE(base, key("x86-64-v3", o, "int KERNEL_NAME();"));
  EXPECT_NE(base, key("x86-64", o,
                      "int KERNEL_NAME(); "
                      "// edit"));
  CompileOptions o2;
  o2.opt_level = "O2";
  EXPECT_NE(base, key("x86-64", o2, "int KERNEL_NAME();"));
  auto tc2 = tc;
  tc2.version_text = "v2";
  EXPECT_NE(base, kernel_key({Backend::kCpu,
                              {"x86-64"},
                              &tc2,
                              tc2.compile_steps({"x86-64"}, o, "source.cpp"),
                              "int KERNEL_NAME();"}));
  EXPECT_EQ(kernel_symbol(Backend::kCuda, "gemm", base), "cuda_gemm_" + base.substr(0, 12));
}

TEST(ResourceUsage, ParsesPtxasVerbose) {
  const std::string log = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z4gemmPKfS0_Pf' for 'sm_80'
ptxas info    : Function properties for _Z4gemmPKfS0_Pf
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 32768 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function '_Z4gemmPKfS0_Pf' for 'sm_90'
ptxas info    : Function properties for _Z4gemmPKfS0_Pf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 96 registers, used 0 barriers, 372 bytes cmem[0]
)";
  auto r = parse_resource_usage(Backend::kCuda, log, {"sm_80", "sm_90"});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]["arch"], "sm_80");
  EXPECT_EQ(r[0]["registers"], 128);
  EXPECT_EQ(r[0]["shared_bytes"], 32768);
  EXPECT_EQ(r[0]["spill_stores"], 8);
  EXPECT_EQ(r[0]["stack_bytes"], 16);
  EXPECT_EQ(r[1]["registers"], 96);
  EXPECT_EQ(r[1]["shared_bytes"], 0);
}

TEST(ResourceUsage, ParsesHipRemarksAndAssignsArchs) {
  auto block = [](int vgprs, bool agprs) {
    std::string s =
        "k.hip:3:1: remark: Function Name: _Z5add_kPKfPfi [-Rpass-analysis=kernel-resource-usage]\n"
        "k.hip:3:1: remark:     SGPRs: 11 [-Rpass-analysis=kernel-resource-usage]\n"
        "k.hip:3:1: remark:     VGPRs: " +
        std::to_string(vgprs) + " [-Rpass-analysis=kernel-resource-usage]\n";
    if (agprs) s += "k.hip:3:1: remark:     AGPRs: 4 [-Rpass-analysis=kernel-resource-usage]\n";
    s += "k.hip:3:1: remark:     ScratchSize [bytes/lane]: 0 "
         "[-Rpass-analysis=kernel-resource-usage]\n"
         "k.hip:3:1: remark:     VGPRs Spill: 2 [-Rpass-analysis=kernel-resource-usage]\n"
         "k.hip:3:1: remark:     LDS Size [bytes/block]: 8192 "
         "[-Rpass-analysis=kernel-resource-usage]\n";
    return s;
  };
  auto r =
      parse_resource_usage(Backend::kRocm, block(4, false) + block(6, true), {"gfx90a", "gfx1030"});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]["arch"], "gfx1030");
  EXPECT_EQ(r[0]["vgprs"], 4);
  EXPECT_EQ(r[0]["lds_bytes"], 8192);
  EXPECT_EQ(r[0]["vgpr_spills"], 2);
  EXPECT_EQ(r[1]["arch"], "gfx90a");
  EXPECT_EQ(r[1]["agprs"], 4);
}

}  // namespace
}  // namespace kforge::core
