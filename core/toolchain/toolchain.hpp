// Compiler discovery and the compile command per backend (DESIGN §6).
// Toolchains::discover() finds g++, nvcc and hipcc (overridable with KFORGE_CXX, KFORGE_NVCC,
// KFORGE_HIPCC), runs each for its version text and accepted archs, and resolves what
// `native` means on this host. A backend whose compiler is missing, or fails to report a
// version, is marked unavailable with the reason; it is never hidden.
// The identity digest (sha256 of realpath + version text) enters every kernel key, so a
// compiler upgrade can never serve a stale artifact. A cpu arch is a core/toolchain/cpu_target
// string; `native` there is the host's whole target (the -march name and every feature
// and cache tuning -march=native implies), and cpu_isa() asks the compiler what a target
// offers (once per target; thread-safe).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/backend.hpp"
#include "core/toolchain/cpu_target.hpp"
#include "core/base/error.hpp"
#include "core/toolchain/library.hpp"
#include "core/process/process.hpp"

namespace kforge::core {

struct CompileOptions {
  std::string opt_level = "O3";  // O0 O1 O2 O3 Os
  bool fast_math = false;
  bool flush_denormals = false;  // GPU float32 denormals as zero (Inductor's ROCm default)
  bool debug_info = false;
  bool aot = false;  // also keep the relocatable object (kernel.o)
  // -DNAME or -DNAME=VALUE; names and values are checked when parsed (no other flag fits).
  std::map<std::string, std::optional<std::string>> defines;
  std::vector<std::string> includes;  // `<library>[/<dir>]`, resolved by the Builder

  nlohmann::json to_json() const;
};

struct CompileStep {
  std::vector<std::string> argv;  // argv[0] is the compiler's absolute path
  std::string output;             // file name the step produces in the job directory
};

struct CpuIsaCache;

struct Toolchain {
  Backend backend = Backend::kCpu;
  bool available = false;
  std::string reason;              // why unavailable
  std::filesystem::path compiler;  // realpath
  std::string version_text;
  std::string release;                // the release it reports: g++ "12.2.0", CUDA "13.0", ROCm (HIP) "5.7"
  std::string identity;               // sha256(realpath + "\n" + version text)
  std::vector<std::string> archs;     // the targets it can build here, and only those
  // Targets the compiler knows but cannot build here, each with the reason (rocm: the target's
  // device library is not installed); never in `archs`, and asked for they are a 400 saying why.
  std::map<std::string, std::string> unbuildable;
  std::filesystem::path device_libs;  // rocm: the directory of hipcc's device libraries
  std::optional<std::string> native;  // what `native` resolves to here
  std::string native_reason;          // why `native` cannot be resolved
  std::string search_path;            // PATH handed to the compiler
  std::set<std::string> isa_features;  // cpu: the ISA extensions the compiler knows
  std::shared_ptr<CpuIsaCache> isa_cache;  // cpu: set by discovery; cpu_isa() needs it

  nlohmann::json to_json() const;
  std::string version_line() const;  // the line of version_text that names the version

  // Resolves `native`, checks each arch against the accepted list. `field` is the JSON
  // pointer used in errors ("/arch"); a list gets "/arch/<i>". The answer lists the
  // accepted archs so the client can correct itself.
  Result<std::vector<std::string>> resolve_archs(const std::vector<std::string>& requested,
                                                 const std::string& field) const;

  // cpu: what a resolved target offers, from `<compiler> <target flags> -Q --help=target`.
  // A target the compiler rejects is kBadRequest naming `field`.
  Result<CpuIsa> cpu_isa(const std::string& target, const std::string& field = "/arch") const;
  // cpu: why a kernel built for `target` cannot run on this host (the features the host
  // lacks), or "" when it can.
  std::string cpu_cannot_run(const std::string& target) const;

  // The compile steps for `source_file` (relative to the job directory): one step, or with
  // options.aot a compile to kernel.o and a link to kernel.so. `includes` are the resolved
  // options.includes, in order.
  std::vector<CompileStep> compile_steps(const std::vector<std::string>& archs,
                                         const CompileOptions& options,
                                         const std::string& source_file,
                                         const std::vector<IncludeDir>& includes = {}) const;
  // What `archs` (resolved) put on a compiler's command line: the part of the flags that
  // the arch, not the options, decides.
  std::vector<std::string> arch_flags(const std::vector<std::string>& archs) const;
  // The link step alone (kernel.o -> kernel.so), as compile_steps' second step with aot.
  CompileStep link_step(const std::vector<std::string>& archs) const;

  // Environment for a compiler child: PATH, HOME and TMPDIR (the job dir), C locale.
  std::vector<std::string> child_env(const std::filesystem::path& job_dir) const;
};

// Resource usage from `ptxas -v` (cuda) or hipcc's kernel-resource-usage remarks (rocm):
// an array with one object per (function, arch). Empty for cpu.
nlohmann::json parse_resource_usage(Backend backend, const std::string& log,
                                    const std::vector<std::string>& archs);

// rocm: the gfx processors of `llc -march=amdgcn -mcpu=help` (not its features, some of
// which have gfx names), in order.
std::vector<std::string> amdgcn_cpus(const std::string& llc_help);
// rocm: the directory of the device libraries that a `hipcc --offload-arch=X -###` run links
// (the one holding oclc_isa_version_<N>.bc), or empty when the output names none.
std::filesystem::path rocm_device_lib_dir(const std::string& driver_output);
// rocm: which of `known` (the gfx targets of hipcc's LLVM, in order) the device libraries in
// `dir` can build: a target gfxN needs oclc_isa_version_N.bc, or clang stops with "cannot find
// ROCm device library for gfxN". The others are put in `unbuildable` with the reason. Device
// libraries without any oclc_isa_version file (later ROCm releases dropped them) filter nothing.
std::vector<std::string> rocm_buildable_archs(const std::vector<std::string>& known,
                                              const std::filesystem::path& dir,
                                              std::map<std::string, std::string>& unbuildable);
// The release a compiler's version text names ("12.2.0", "13.0", "5.7"), or "".
std::string compiler_release(Backend backend, const std::string& version_text);

// What `native` means for an NVIDIA device of compute capability `compute_cap` ("9.0"):
// the arch-specific target (sm_90a: wgmma, setmaxnreg) where nvcc accepts one, since native
// code runs on this very device and no other; else the plain target (sm_86).
std::string cuda_native_arch(std::string compute_cap, const std::vector<std::string>& archs);

class Toolchains {
 public:
  static Toolchains discover(const Spawner& spawn = run_process);
  // For tests: a fixed set.
  explicit Toolchains(std::vector<Toolchain> all) : all_(std::move(all)) {}

  const Toolchain& get(Backend b) const;
  nlohmann::json to_json() const;

  // Header libraries (--library) the compilers may be pointed at.
  const std::vector<HeaderLibrary>& libraries() const { return libraries_; }
  void set_libraries(std::vector<HeaderLibrary> libs) { libraries_ = std::move(libs); }
  // binutils' objcopy (renames an exported symbol in kernel.o); empty when missing.
  const std::filesystem::path& objcopy() const { return objcopy_; }
  void set_objcopy(std::filesystem::path p) { objcopy_ = std::move(p); }

 private:
  std::vector<Toolchain> all_;
  std::vector<HeaderLibrary> libraries_;
  std::filesystem::path objcopy_;
};

}  // namespace kforge::core
