#include "core/toolchain.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

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

// An expansion in the form g++ 12 prints it, for a host whose -march name lacks features the
// host has (as g++ 12 names a Zen 4 by an AVX2-only name): the flags add AVX-512. Parsed only;
// nothing here runs on, or depends on, this host's CPU.
const std::string kExpansion =
    "COLLECT_GCC_OPTIONS='-march=native' '-E'\n"
    " /usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -E -quiet -imultiarch x86_64-linux-gnu /dev/null "
    "\"-march=x86-64-v3\" -mmmx -msse -msse2 -mavx -mavx2 -mno-fma4 -mno-xop -mfma -mavx512f -mavx512bw "
    "-mavx512vl -mno-amx-tile -mno-pku --param \"l1-cache-size=48\" --param \"l2-cache-size=1024\" "
    "\"-mtune=x86-64-v3\" -fasynchronous-unwind-tables -dumpbase null\n";
// What that -march name alone enables, of those features.
const std::set<std::string> kMarchFeatures = {"mmx", "sse", "sse2", "avx", "avx2", "fma", "pku"};

TEST(CpuTarget, NativeIsTheNameAndEveryFeatureAndTuningItImplies) {
  std::set<std::string> known;
  auto t = cpu_native_target(kExpansion, kMarchFeatures, &known);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(cpu_expansion_march(kExpansion), "x86-64-v3");
  EXPECT_EQ(t->str(), "x86-64-v3+avx512bw+avx512f+avx512vl+l1-cache-size=48+l2-cache-size=1024+no-pku");
  EXPECT_TRUE(known.contains("avx512f") && known.contains("xop") && known.contains("amx-tile"));
  EXPECT_FALSE(known.contains("tune=x86-64-v3"));
  const auto flags = t->flags();
  EXPECT_EQ(flags.front(), "-march=x86-64-v3");
  EXPECT_TRUE(has(flags, "-mavx512f") && has(flags, "-mno-pku") && has(flags, "--param=l1-cache-size=48"));

  // The same host without one feature is another target, and another key.
  std::string fewer = kExpansion;
  fewer.replace(fewer.find("-mavx512vl"), 10, "-mno-avx512vl");
  auto t2 = cpu_native_target(fewer, kMarchFeatures, nullptr);
  ASSERT_TRUE(t2);
  EXPECT_EQ(t2->str(), "x86-64-v3+avx512bw+avx512f+l1-cache-size=48+l2-cache-size=1024+no-pku");
  auto tc = fake(Backend::kCpu, {"x86-64-v3", "x86-64-v4"}, t->str());
  tc.isa_features = known;
  auto key = [&](const std::string& arch) {
    auto steps = tc.compile_steps({arch}, {}, "source.cpp");
    return kernel_key({Backend::kCpu, {arch}, &tc, steps, "int KERNEL_NAME();", {}});
  };
  EXPECT_NE(key(t->str()), key(t2->str()));
  EXPECT_EQ(key(t->str()), key(cpu_native_target(kExpansion, kMarchFeatures, nullptr)->str()));
  // Resolving `native` gives the whole target; it reaches the command line item by item.
  EXPECT_EQ(tc.resolve_archs({"native"}, "/arch").value(), std::vector<std::string>{t->str()});
  const auto argv = tc.compile_steps({t->str()}, {}, "source.cpp").front().argv;
  EXPECT_TRUE(has(argv, "-march=x86-64-v3") && has(argv, "-mavx512vl") && has(argv, "-mno-pku"));
}

TEST(CpuTarget, ExplicitTargetsAreNormalisedAndCheckedItemByItem) {
  const std::set<std::string> known = {"avx2", "avx512f", "avx512bw", "amx-tile"};
  auto t = CpuTarget::parse("x86-64-v3+avx512bw+avx512f", known, "/arch");
  ASSERT_TRUE(t);
  EXPECT_EQ(CpuTarget::parse("x86-64-v3+avx512f+avx512bw+avx512f", known, "/arch")->str(), t->str());
  EXPECT_EQ(CpuTarget::parse("x86-64-v4+no-amx-tile", known, "/arch")->flags(),
            (std::vector<std::string>{"-march=x86-64-v4", "-mno-amx-tile"}));
  for (const char* bad : {"x86-64+fplugin=/tmp/x.so", "x86-64+avx9000", "x86-64+avx2+no-avx2",
                          "x86-64+l1-cache-size=-1", "-B/tmp", "x86-64+", "x86 64"}) {
    auto r = CpuTarget::parse(bad, known, "/arch");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().fields.at(0).field, "/arch");
  }
  auto tc = fake(Backend::kCpu, {"x86-64-v3", "x86-64-v4"}, std::nullopt);
  tc.isa_features = known;
  EXPECT_EQ(tc.resolve_archs({"x86-64-v3+avx512f+avx512bw"}, "/arch").value(),
            std::vector<std::string>{"x86-64-v3+avx512bw+avx512f"});
  EXPECT_FALSE(tc.resolve_archs({"x86-64-v9+avx2"}, "/arch"));  // the name must be one g++ knows
}

TEST(CpuTarget, TheMachineModelFollowsTheFeatures) {
  const std::string help =
      "  -mavx                       \t\t[enabled]\n"
      "  -mavx2                      \t\t[enabled]\n"
      "  -mavx512f                   \t\t[disabled]\n"
      "  -mfma                       \t\t[enabled]\n"
      "  -m64                        \t\t[enabled]\n";
  const std::set<std::string> known = {"avx", "avx2", "avx512f", "fma"};
  auto avx2 = CpuIsa::from_features(cpu_enabled_features(help, known));
  EXPECT_EQ(avx2.features, (std::vector<std::string>{"avx", "avx2", "fma"}));
  EXPECT_EQ(avx2.vector_floats, 8);
  EXPECT_EQ(avx2.vector_registers, 16);
  EXPECT_TRUE(avx2.fma);
  auto avx512 = CpuIsa::from_features({"avx", "avx2", "avx512f", "fma"});
  EXPECT_EQ(avx512.vector_floats, 16);
  EXPECT_EQ(avx512.vector_registers, 32);
  EXPECT_EQ(avx512.missing_on(avx2), std::vector<std::string>{"avx512f"});
  EXPECT_TRUE(avx2.missing_on(avx512).empty());
  EXPECT_EQ(CpuIsa::from_features({"sse2"}).vector_floats, 4);
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
        {Backend::kCpu, {arch}, &tc, tc.compile_steps({arch}, opt, "source.cpp"), src, {}});
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
                              "int KERNEL_NAME();",
                              {}}));
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
