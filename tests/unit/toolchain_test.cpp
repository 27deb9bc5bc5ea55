#include "core/toolchain/toolchain.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>

#include "core/build/build.hpp"
#include "unit/scratch.hpp"

namespace kforge::core {
namespace {

namespace fs = std::filesystem;
using testing::Scratch;

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

TEST(Toolchain, ATargetTheCompilerKnowsButCannotBuildIsA400SayingWhy) {
  auto rocm = fake(Backend::kRocm, {"gfx90a", "gfx942"}, std::nullopt);
  rocm.unbuildable["gfx1100"] = "its ROCm device library oclc_isa_version_1100.bc is not in /lib/bitcode";
  auto bad = rocm.resolve_archs({"gfx90a", "gfx1100:xnack-"}, "/arch");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, ErrorKind::kBadRequest);
  EXPECT_EQ(bad.error().fields.at(0).field, "/arch/1");
  EXPECT_NE(bad.error().message.find("`gfx1100:xnack-` cannot be built by /usr/bin/hipcc: its ROCm device library "
                                     "oclc_isa_version_1100.bc is not in /lib/bitcode"),
            std::string::npos)
      << bad.error().message;
  EXPECT_EQ(bad.error().extra["accepted_archs"], (nlohmann::json{"gfx90a", "gfx942"}));
  // A target nobody knows keeps the plain answer.
  auto unknown = rocm.resolve_archs({"gfx9999"}, "/arch");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("is not accepted by"), std::string::npos);
  EXPECT_EQ(rocm.to_json()["unbuildable"]["gfx1100"], rocm.unbuildable["gfx1100"]);
}

// What Debian 12's hipcc 5.2 has: LLVM 15 knows gfx1100 and gfx940, device libraries 5.2 have
// gfx940's but not gfx1100's (and, like every release, nothing for the features named gfx9/gfx10).
TEST(RocmTargets, OnlyThoseWithTheirDeviceLibraryAreOffered) {
  Scratch dir;
  for (const char* f : {"ocml.bc", "oclc_isa_version_90a.bc", "oclc_isa_version_940.bc", "oclc_isa_version_1030.bc"})
    std::ofstream(dir / f) << "BC";
  std::map<std::string, std::string> why;
  EXPECT_EQ(rocm_buildable_archs({"gfx1030", "gfx1100", "gfx90a", "gfx940", "gfx942"}, dir.path(), why),
            (std::vector<std::string>{"gfx1030", "gfx90a", "gfx940"}));
  ASSERT_EQ(why.size(), 2u);
  EXPECT_NE(why["gfx1100"].find("oclc_isa_version_1100.bc is not in " + dir.path().string()), std::string::npos) << why["gfx1100"];
  EXPECT_NE(why["gfx942"].find("oclc_isa_version_942.bc"), std::string::npos);
  // Device libraries without per-target ISA files (later ROCm releases) filter nothing.
  Scratch merged;
  std::ofstream(merged / "ocml.bc") << "BC";
  why.clear();
  EXPECT_EQ(rocm_buildable_archs({"gfx1100", "gfx942"}, merged.path(), why), (std::vector<std::string>{"gfx1100", "gfx942"}));
  EXPECT_TRUE(why.empty());
}

TEST(RocmTargets, TheDriverNamesWhereItsDeviceLibrariesAre) {
  // `hipcc --offload-arch=gfx90a -### ...` of Debian 12 (its hipcc passes --hip-device-lib-path)
  // and of Debian 13 (clang finds them in its resource directory).
  EXPECT_EQ(rocm_device_lib_dir(R"( "-mlink-builtin-bitcode" "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ocml.bc" )"
                                R"("-mlink-builtin-bitcode" "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode/oclc_isa_version_90a.bc")"),
            "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode");
  EXPECT_EQ(rocm_device_lib_dir("-mlink-builtin-bitcode /usr/lib/llvm-17/lib/clang/17/amdgcn/bitcode/oclc_isa_version_90a.bc\n"),
            "/usr/lib/llvm-17/lib/clang/17/amdgcn/bitcode");
  EXPECT_EQ(rocm_device_lib_dir("clang: error: cannot find ROCm device library for gfx90a"), "");
}

TEST(RocmTargets, TheProcessorsOfLlcNotItsFeatures) {
  const std::string help =
      "Available CPUs for this target:\n\n  fiji        - Select the fiji processor.\n"
      "  gfx1100     - Select the gfx1100 processor.\n  gfx90a      - Select the gfx90a processor.\n"
      "  gfx942      - Select the gfx942 processor.\n\nAvailable features for this target:\n\n"
      "  gfx10                                 - GFX10 GPU generation.\n"
      "  gfx90a-insts                          - Additional instructions for GFX90A+.\n"
      "  gfx9                                  - GFX9 GPU generation.\n";
  EXPECT_EQ(amdgcn_cpus(help), (std::vector<std::string>{"gfx1100", "gfx90a", "gfx942"}));
}

TEST(Toolchain, ReleaseFromEachCompilersVersionText) {
  EXPECT_EQ(compiler_release(Backend::kCpu, "g++ (Debian 12.2.0-14) 12.2.0"), "12.2.0");
  EXPECT_EQ(compiler_release(Backend::kCpu, "x86_64-linux-gnu-g++-14 (Debian 14.2.0-19) 14.2.0"), "14.2.0");
  EXPECT_EQ(compiler_release(Backend::kCuda,
                             "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"),
            "13.0");
  EXPECT_EQ(compiler_release(Backend::kRocm, "HIP version: 5.7.31921-0\nDebian clang version 17.0.6 (22+b2)"), "5.7");
  EXPECT_EQ(compiler_release(Backend::kRocm, "clang version 17"), "");
}

// Sets an environment variable for a test's lifetime (discovery reads KFORGE_NVCC/KFORGE_HIPCC).
class EnvVar {
 public:
  EnvVar(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    ::setenv(name, value.c_str(), 1);
  }
  ~EnvVar() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// An executable file standing for a compiler (the spawner below answers for it).
std::string fake_program(const Scratch& dir, const std::string& name) {
  const auto p = dir / name;
  std::ofstream(p) << "#!/bin/false\n";
  ::chmod(p.c_str(), 0755);
  return p.string();
}

bool argv_has(const ProcessSpec& spec, const std::string& word) {
  return std::find(spec.argv.begin(), spec.argv.end(), word) != spec.argv.end();
}

Result<ProcessResult> answer(const std::string& output, int exit_code = 0) {
  ProcessResult r;
  r.output = output;
  r.exit_code = exit_code;
  return r;
}

// nvcc's lists name no arch-specific target and the -gencode kforge passes names two archs:
// offered are the sm_XX that both lists have, and the sm_XXa that a dry run of that -gencode
// accepts (CUDA 13 does for sm_90a and sm_100a, refuses sm_89a, which is never tried).
TEST(Toolchain, NvccOffersWhatItsGencodeAccepts) {
  Scratch dir;
  EnvVar nvcc("KFORGE_NVCC", fake_program(dir, "nvcc"));
  std::vector<std::string> dry_runs;
  auto spawn = [&](const ProcessSpec& spec) -> Result<ProcessResult> {
    if (spec.argv[0].ends_with("/nvcc")) {
      if (argv_has(spec, "--version")) return answer("Cuda compilation tools, release 13.0, V13.0.88\n");
      if (argv_has(spec, "--list-gpu-code")) return answer("sm_80\nsm_89\nsm_90\nsm_100\nsm_103\nsm_999\n");
      if (argv_has(spec, "--list-gpu-arch")) return answer("compute_80\ncompute_89\ncompute_90\ncompute_100\ncompute_103\n");
      if (argv_has(spec, "--dryrun")) {
        dry_runs.push_back(spec.argv[3]);
        const bool ok = spec.argv[3].starts_with("arch=compute_90a,") || spec.argv[3].starts_with("arch=compute_100a,");
        return answer(ok ? "" : "nvcc fatal   : Unsupported gpu architecture", ok ? 0 : 1);
      }
    }
    return answer("", 1);
  };
  const auto all = Toolchains::discover(spawn);
  const auto& cuda = all.get(Backend::kCuda);
  ASSERT_TRUE(cuda.available) << cuda.reason;
  EXPECT_EQ(cuda.archs, (std::vector<std::string>{"sm_80", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_103"}));
  EXPECT_EQ(dry_runs, (std::vector<std::string>{"arch=compute_90a,code=[sm_90a,compute_90a]",
                                                "arch=compute_100a,code=[sm_100a,compute_100a]",
                                                "arch=compute_103a,code=[sm_103a,compute_103a]"}));
  ASSERT_TRUE(cuda.unbuildable.contains("sm_999"));
  EXPECT_NE(cuda.unbuildable.at("sm_999").find("no compute_999"), std::string::npos);
  EXPECT_EQ(cuda.release, "13.0");
  auto refused = cuda.resolve_archs({"sm_103a"}, "/arch");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().fields.at(0).field, "/arch");
}

// hipcc discovered as Debian 12's, with its device libraries in a scratch directory: what the
// driver's -### links is where they are looked for, and a target without its library is listed
// as unbuildable with the reason.
TEST(Toolchain, HipccOffersWhatItsDeviceLibrariesBuild) {
  Scratch dir;
  EnvVar hipcc("KFORGE_HIPCC", fake_program(dir, "hipcc"));
  const fs::path libs = dir / "bitcode";
  fs::create_directories(libs);
  for (const char* f : {"ocml.bc", "oclc_isa_version_90a.bc", "oclc_isa_version_1030.bc"}) std::ofstream(libs / f) << "BC";
  auto spawn = [&](const ProcessSpec& spec) -> Result<ProcessResult> {
    if (spec.argv[0].ends_with("/hipcc") && argv_has(spec, "--version"))
      return answer("HIP version: 5.2.21153-0\nDebian clang version 15.0.6\nTarget: x86_64-pc-linux-gnu\n");
    if (spec.argv[0].ends_with("/hipcc") && argv_has(spec, "-###"))
      return answer("\"-mlink-builtin-bitcode\" \"" + (libs / "oclc_isa_version_90a.bc").string() + "\"\n");
    if (spec.argv[0].ends_with("/llc"))
      return answer("Available CPUs for this target:\n  gfx1030 - x\n  gfx1100 - x\n  gfx90a - x\n"
                    "Available features for this target:\n  gfx10 - x\n");
    return answer("", 1);
  };
  const auto all = Toolchains::discover(spawn);
  const auto& rocm = all.get(Backend::kRocm);
  ASSERT_TRUE(rocm.available) << rocm.reason;
  EXPECT_EQ(rocm.device_libs, libs);
  EXPECT_EQ(rocm.release, "5.2");
  // With an llc-15 on this machine its processors are asked; without, the fixed list applies.
  EXPECT_TRUE(has(rocm.archs, "gfx90a") && has(rocm.archs, "gfx1030")) << nlohmann::json(rocm.archs);
  EXPECT_FALSE(has(rocm.archs, "gfx1100") || has(rocm.archs, "gfx10"));
  ASSERT_TRUE(rocm.unbuildable.contains("gfx1100"));
  for (const auto& a : rocm.archs) EXPECT_TRUE(fs::exists(libs / ("oclc_isa_version_" + a.substr(3) + ".bc"))) << a;
  EXPECT_EQ(rocm.to_json()["device_libs"], libs.string());
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
  EXPECT_FALSE(has(rocm[0].argv, "-fgpu-flush-denormals-to-zero"));

  o.flush_denormals = true;
  EXPECT_TRUE(has(fake(Backend::kRocm, {"gfx90a"}, std::nullopt).compile_steps({"gfx90a"}, o, "source.hip")[0].argv,
                  "-fgpu-flush-denormals-to-zero"));
  EXPECT_TRUE(has(fake(Backend::kCuda, {"sm_90"}, std::nullopt).compile_steps({"sm_90"}, o, "source.cu")[0].argv,
                  "-ftz=true"));
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
