#include "core/toolchain/toolchain.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "core/base/hash.hpp"
#include "core/base/sharded_map.hpp"

namespace kforge::core {
namespace fs = std::filesystem;

// The machine model of each cpu target asked for so far: one compiler run per target.
// What the compiler said of each cpu target, and how each requested target spelling
// resolved (march, canonical string): asked once, then read on every request.
struct CpuIsaCache {
  explicit CpuIsaCache(Spawner s) : spawn(std::move(s)) {}
  Spawner spawn;
  ShardedMap<CpuIsa> by_target{1024};
  ShardedMap<std::pair<std::string, std::string>> resolved{1024};
};

namespace {

constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// Runs a discovery probe: short timeout, small output.
std::optional<std::string> probe(const Spawner& spawn, std::vector<std::string> argv,
                                 const std::string& path) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.cwd = "/";
  spec.env = {"PATH=" + path, "LANG=C", "LC_ALL=C", "HOME=/tmp"};
  spec.timeout = std::chrono::seconds(30);
  spec.output_cap = 1 << 20;
  auto r = spawn(spec);
  if (!r || !r->ok()) return std::nullopt;
  return r->output;
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream ss(s);
  std::vector<std::string> out;
  for (std::string w; ss >> w;) out.push_back(w);
  return out;
}

// Finds the compiler: an explicit override, then candidates, then PATH.
fs::path locate(const char* env_var, const std::vector<std::string>& candidates,
                const std::string& name, const std::string& path) {
  if (const char* v = std::getenv(env_var); v && *v) return find_program(v, path);
  for (const auto& c : candidates) {
    if (!c.empty() && ::access(c.c_str(), X_OK) == 0) return c;
  }
  return find_program(name, path);
}

void finish_identity(Toolchain& tc) {
  tc.identity = sha256_hex(tc.compiler.string() + "\n" + tc.version_text);
  tc.available = true;
}

Toolchain discover_cpu(const Spawner& spawn, const std::string& path) {
  Toolchain tc;
  tc.backend = Backend::kCpu;
  fs::path cxx = locate("KFORGE_CXX", {}, "g++", path);
  if (cxx.empty()) {
    tc.reason = "g++ not found on PATH (set KFORGE_CXX)";
    return tc;
  }
  std::error_code ec;
  tc.compiler = fs::canonical(cxx, ec);
  tc.search_path = tc.compiler.parent_path().string() + ":" + kDefaultPath;
  auto version = probe(spawn, {tc.compiler.string(), "--version"}, tc.search_path);
  if (!version) {
    tc.reason = tc.compiler.string() + " --version failed";
    return tc;
  }
  tc.version_text = version->substr(0, version->find('\n'));
  tc.release = compiler_release(Backend::kCpu, tc.version_text);
  if (auto help = probe(spawn, {tc.compiler.string(), "-Q", "--help=target"}, tc.search_path)) {
    auto pos = help->find("Known valid arguments for -march= option:");
    if (pos != std::string::npos) {
      auto line_start = help->find('\n', pos) + 1;
      auto line_end = help->find('\n', line_start);
      for (auto& w : words(help->substr(line_start, line_end - line_start))) {
        if (w != "native") tc.archs.push_back(w);
      }
    }
  }
  if (tc.archs.empty()) tc.archs = {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"};
  tc.isa_cache = std::make_shared<CpuIsaCache>(spawn);
  // What -march=native turns into: the driver prints cc1's command line (-march=<name>, then
  // every ISA feature switched on or off, then the cache sizes). The name alone is not the
  // host: g++ 12 names a Zen 4 `znver3` and adds the AVX-512 features by hand.
  auto expansion = probe(spawn, {tc.compiler.string(), "-march=native", "-###", "-E", "-x", "c++", "/dev/null"},
                         tc.search_path);
  const std::string march = expansion ? cpu_expansion_march(*expansion) : "";
  if (march.empty()) {
    tc.native_reason = tc.compiler.string() + " -march=native -### did not name a CPU";
  } else {
    (void)cpu_native_target(*expansion, {}, &tc.isa_features);
    auto defaults = probe(spawn, {tc.compiler.string(), "-march=" + march, "-Q", "--help=target"}, tc.search_path);
    auto target = defaults ? cpu_native_target(*expansion, cpu_enabled_features(*defaults, tc.isa_features), nullptr)
                           : std::unexpected(Error::make(ErrorKind::kUnavailable, "-march=" + march + " -Q --help=target failed"));
    if (target) {
      tc.native = target->str();
    } else {
      tc.native_reason = target.error().message;
    }
  }
  finish_identity(tc);
  return tc;
}

Toolchain discover_cuda(const Spawner& spawn, const std::string& path) {
  Toolchain tc;
  tc.backend = Backend::kCuda;
  std::string home = env_or("CUDA_HOME", env_or("CUDA_PATH", "/usr/local/cuda"));
  fs::path nvcc = locate("KFORGE_NVCC", {home + "/bin/nvcc"}, "nvcc", path);
  if (nvcc.empty()) {
    tc.reason =
        "nvcc not found in $CUDA_HOME/bin, /usr/local/cuda/bin or on PATH (set KFORGE_NVCC)";
    return tc;
  }
  std::error_code ec;
  tc.compiler = fs::canonical(nvcc, ec);
  tc.search_path = tc.compiler.parent_path().string() + ":" + kDefaultPath;
  auto version = probe(spawn, {tc.compiler.string(), "--version"}, tc.search_path);
  if (!version) {
    tc.reason = tc.compiler.string() + " --version failed";
    return tc;
  }
  tc.version_text = *version;
  while (!tc.version_text.empty() && tc.version_text.back() == '\n') tc.version_text.pop_back();
  tc.release = compiler_release(Backend::kCuda, tc.version_text);
  // kforge's -gencode names the real and the virtual arch (code=[sm_XX,compute_XX]): an arch
  // is offered only where nvcc lists both.
  std::set<std::string> virtual_archs;
  if (auto list = probe(spawn, {tc.compiler.string(), "--list-gpu-arch"}, tc.search_path)) {
    for (auto& w : words(*list)) {
      if (w.starts_with("compute_")) virtual_archs.insert(w.substr(8));
    }
  }
  // nvcc lists no arch-specific target (sm_90a): each is offered where a dry run of the
  // -gencode kforge would pass is accepted (sm_89a is not, sm_90a and sm_100a are).
  auto gencode_accepted = [&](const std::string& num) {
    return probe(spawn, {tc.compiler.string(), "--dryrun", "-gencode",
                         "arch=compute_" + num + ",code=[sm_" + num + ",compute_" + num + "]",
                         "-x", "cu", "-c", "/dev/null", "-o", "/dev/null"},
                 tc.search_path)
        .has_value();
  };
  if (auto codes = probe(spawn, {tc.compiler.string(), "--list-gpu-code"}, tc.search_path)) {
    for (auto& w : words(*codes)) {
      if (!w.starts_with("sm_")) continue;
      const std::string num = w.substr(3);
      if (!virtual_archs.empty() && !virtual_archs.contains(num)) {
        tc.unbuildable[w] = "nvcc --list-gpu-code lists " + w + " but --list-gpu-arch has no compute_" + num +
                            ", and kforge's -gencode needs both";
        continue;
      }
      tc.archs.push_back(w);
      // Architecture-specific feature sets (wgmma, tcgen05) exist from sm_90 on.
      if (std::atoi(num.c_str()) >= 90 && gencode_accepted(num + "a")) tc.archs.push_back(w + "a");
    }
  }
  if (tc.archs.empty()) {
    tc.reason = "nvcc --list-gpu-code reported no architectures";
    return tc;
  }
  fs::path smi = find_program("nvidia-smi", path);
  auto cap = smi.empty()
                 ? std::nullopt
                 : probe(spawn, {smi.string(), "--query-gpu=compute_cap", "--format=csv,noheader"},
                         tc.search_path);
  if (cap && !words(*cap).empty()) {
    tc.native = cuda_native_arch(words(*cap).front(), tc.archs);
  } else {
    tc.native_reason = "no NVIDIA GPU on this host (nvidia-smi found none)";
  }
  finish_identity(tc);
  return tc;
}

Toolchain discover_rocm(const Spawner& spawn, const std::string& path) {
  Toolchain tc;
  tc.backend = Backend::kRocm;
  std::string rocm = env_or("ROCM_PATH", "/opt/rocm");
  fs::path hipcc = locate("KFORGE_HIPCC", {rocm + "/bin/hipcc"}, "hipcc", path);
  if (hipcc.empty()) {
    tc.reason = "hipcc not found in $ROCM_PATH/bin, /opt/rocm/bin or on PATH (set KFORGE_HIPCC)";
    return tc;
  }
  std::error_code ec;
  tc.compiler = fs::canonical(hipcc, ec);
  tc.search_path = tc.compiler.parent_path().string() + ":" + kDefaultPath;
  // An explicit --offload-arch keeps hipcc from probing for a GPU.
  auto version =
      probe(spawn, {tc.compiler.string(), "--offload-arch=gfx90a", "--version"}, tc.search_path);
  if (!version) {
    tc.reason = tc.compiler.string() + " --version failed";
    return tc;
  }
  tc.version_text = *version;
  while (!tc.version_text.empty() && tc.version_text.back() == '\n') tc.version_text.pop_back();
  tc.release = compiler_release(Backend::kRocm, tc.version_text);
  // The gfx targets known are those of the LLVM that hipcc drives.
  std::smatch m;
  static const std::regex kClang(R"(clang version (\d+))");
  std::vector<std::string> llcs;
  std::string clang_major;
  if (std::regex_search(tc.version_text, m, kClang)) {
    clang_major = m[1].str();
    llcs.push_back("/usr/lib/llvm-" + clang_major + "/bin/llc");
  }
  llcs.push_back(rocm + "/llvm/bin/llc");
  for (const auto& llc : llcs) {
    if (::access(llc.c_str(), X_OK) != 0) continue;
    if (auto help = probe(spawn, {llc, "-march=amdgcn", "-mcpu=help"}, tc.search_path)) tc.archs = amdgcn_cpus(*help);
    if (!tc.archs.empty()) break;
  }
  if (tc.archs.empty()) {
    // No llc to ask: the targets every ROCm release since 5.0 compiles for.
    tc.archs = {"gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030", "gfx1100"};
  }
  // Built are only those whose device library is installed (Debian 12's hipcc 5.2 has LLVM 15,
  // which knows gfx1100, and device libraries 5.2, which lack it): where the driver links them,
  // else where Debian and ROCm put them.
  auto driver = probe(spawn, {tc.compiler.string(), "--offload-arch=gfx90a", "-###", "-x", "hip", "-c", "/dev/null",
                              "-o", "/dev/null"},
                      tc.search_path);
  fs::path libs = driver ? rocm_device_lib_dir(*driver) : fs::path();
  std::vector<std::string> places = {rocm + "/amdgcn/bitcode", "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"};
  if (!clang_major.empty()) places.push_back("/usr/lib/llvm-" + clang_major + "/lib/clang/" + clang_major + "/amdgcn/bitcode");
  for (const auto& p : places) {
    if (libs.empty() && ::access((p + "/ocml.bc").c_str(), R_OK) == 0) libs = p;
  }
  if (libs.empty()) {
    std::string where;
    for (const auto& p : places) where += (where.empty() ? "" : ", ") + p;
    tc.reason = "hipcc's ROCm device libraries were not found (`" + tc.compiler.string() +
                " -###` links none, and none is in " + where + "): it cannot build for any target";
    return tc;
  }
  tc.device_libs = libs;
  tc.archs = rocm_buildable_archs(tc.archs, libs, tc.unbuildable);
  if (tc.archs.empty()) {
    tc.reason = "the ROCm device libraries in " + libs.string() + " build none of the targets hipcc's LLVM knows";
    return tc;
  }
  fs::path agents = find_program("rocm_agent_enumerator", path);
  auto listed = agents.empty() || ::access("/dev/kfd", R_OK) != 0
                    ? std::nullopt
                    : probe(spawn, {agents.string()}, tc.search_path);
  if (listed) {
    for (auto& w : words(*listed)) {
      if (w != "gfx000") {
        tc.native = w;
        break;
      }
    }
  }
  if (!tc.native) tc.native_reason = "no AMD GPU on this host (/dev/kfd absent or no agent listed)";
  finish_identity(tc);
  return tc;
}

void add_opt_flags(std::vector<std::string>& argv, const CompileOptions& o, Backend b) {
  argv.push_back("-" + o.opt_level);
  if (o.fast_math) argv.push_back(b == Backend::kCuda ? "--use_fast_math" : "-ffast-math");
  if (o.flush_denormals && b != Backend::kCpu) argv.push_back(b == Backend::kCuda ? "-ftz=true" : "-fgpu-flush-denormals-to-zero");
  if (o.debug_info) argv.push_back(b == Backend::kCuda ? "-lineinfo" : "-g");
}

}  // namespace

nlohmann::json CompileOptions::to_json() const {
  nlohmann::json j = {
      {"opt_level", opt_level}, {"fast_math", fast_math}, {"debug_info", debug_info}, {"aot", aot}};
  // Only when used, so that requests without them keep their keys.
  if (flush_denormals) j["flush_denormals"] = true;
  if (!defines.empty()) {
    j["defines"] = nlohmann::json::object();
    for (const auto& [k, v] : defines) j["defines"][k] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  }
  if (!includes.empty()) j["includes"] = includes;
  return j;
}

std::string Toolchain::version_line() const {
  std::istringstream in(version_text);
  std::string first;
  for (std::string line; std::getline(in, line);) {
    if (first.empty()) first = line;
    if (line.find("release") != std::string::npos || line.find("version") != std::string::npos)
      return line;
  }
  return first;
}

nlohmann::json Toolchain::to_json() const {
  nlohmann::json j = {{"backend", backend_name(backend)}, {"available", available}};
  if (!release.empty()) j["release"] = release;
  if (!available) {
    j["status"] = "unavailable";
    j["reason"] = reason;
    if (!compiler.empty()) j["compiler"] = compiler.string();
    return j;
  }
  j["status"] = "available";
  j["compiler"] = compiler.string();
  j["version"] = version_text;
  j["identity"] = identity;
  j["archs"] = archs;
  j["unbuildable"] = unbuildable;
  if (backend == Backend::kRocm) j["device_libs"] = device_libs.string();
  j["native"] = native ? nlohmann::json(*native) : nlohmann::json(nullptr);
  if (!native) j["native_reason"] = native_reason;
  if (backend == Backend::kCpu) {
    j["isa_features"] = isa_features;
    if (native) {
      if (auto isa = cpu_isa(*native)) j["native_isa"] = isa->to_json();
    }
  }
  return j;
}

Result<std::vector<std::string>> Toolchain::resolve_archs(const std::vector<std::string>& requested,
                                                          const std::string& field) const {
  std::vector<std::string> out;
  auto accepted_list = [&] {
    std::string s;
    for (const auto& a : archs) s += (s.empty() ? "" : " ") + a;
    return s;
  };
  for (size_t i = 0; i < requested.size(); ++i) {
    std::string f = requested.size() > 1 ? field + "/" + std::to_string(i) : field;
    std::string arch = requested[i];
    if (arch == "native") {
      if (!native) return fail_field(f, "`native` cannot be resolved: " + native_reason);
      arch = *native;
    }
    std::string base = arch;
    if (backend == Backend::kCpu) {
      auto known = isa_cache ? isa_cache->resolved.get(arch) : std::nullopt;
      if (!known) {
        auto target = CpuTarget::parse(arch, isa_features, f);
        if (!target) return std::unexpected(target.error());
        known = {target->march, target->str()};
        if (isa_cache) isa_cache->resolved.put(arch, *known);
      }
      base = known->first;
      arch = known->second;
    }
    if (backend == Backend::kRocm) {
      // Target IDs: gfx90a:xnack+:sramecc-
      std::stringstream ss(arch);
      std::getline(ss, base, ':');
      for (std::string feat; std::getline(ss, feat, ':');) {
        if (feat != "xnack+" && feat != "xnack-" && feat != "sramecc+" && feat != "sramecc-") {
          return fail_field(f, "unknown target feature `" + feat + "` in `" + arch +
                                   "` (allowed: xnack+ xnack- sramecc+ sramecc-)");
        }
      }
    }
    if (std::find(archs.begin(), archs.end(), base) == archs.end()) {
      const auto why = unbuildable.find(base);
      Error e = Error::bad_field(
          f, why != unbuildable.end()
                 ? "arch `" + arch + "` cannot be built by " + compiler.string() + ": " + why->second +
                       "; accepted: " + accepted_list()
                 : "arch `" + arch + "` is not accepted by " + compiler.string() + "; accepted: " + accepted_list());
      e.extra["accepted_archs"] = archs;
      return std::unexpected(e);
    }
    if (std::find(out.begin(), out.end(), arch) != out.end()) {
      return fail_field(f, "arch `" + arch + "` is listed twice");
    }
    out.push_back(arch);
  }
  if (out.empty()) return fail_field(field, "at least one arch is required");
  if (backend == Backend::kCpu && out.size() != 1) {
    return fail_field(field, "the cpu backend builds for exactly one -march target");
  }
  if (backend == Backend::kCpu && isa_cache) {
    if (auto isa = cpu_isa(out.front(), field); !isa) return std::unexpected(isa.error());
  }
  return out;
}

Result<CpuIsa> Toolchain::cpu_isa(const std::string& target, const std::string& field) const {
  if (!isa_cache) return fail(ErrorKind::kUnavailable, "no compiler to ask about cpu target `" + target + "`");
  if (auto known = isa_cache->by_target.get(target)) return *known;
  // Not under a lock: two first requests for one target may both ask; the answers agree.
  auto parsed = CpuTarget::parse(target, isa_features, field);
  if (!parsed) return std::unexpected(parsed.error());
  std::vector<std::string> argv{compiler.string()};
  for (auto& flag : parsed->flags()) argv.push_back(flag);
  argv.insert(argv.end(), {"-Q", "--help=target"});
  auto help = probe(isa_cache->spawn, argv, search_path);
  if (!help) return fail_field(field, compiler.string() + " rejects the cpu target `" + target + "`");
  CpuIsa isa = CpuIsa::from_features(cpu_enabled_features(*help, isa_features));
  isa_cache->by_target.put(target, isa);
  return isa;
}

std::string Toolchain::cpu_cannot_run(const std::string& target) const {
  if (!native) return "";
  auto want = cpu_isa(target);
  auto have = cpu_isa(*native);
  if (!want || !have) return "";
  auto missing = want->missing_on(*have);
  if (missing.empty()) return "";
  std::string list;
  for (const auto& f : missing) list += (list.empty() ? "" : " ") + f;
  return "this host's CPU lacks " + list + " (native here is " + *native +
         "): a kernel built for `" + target + "` would die of SIGILL";
}

std::vector<std::string> amdgcn_cpus(const std::string& llc_help) {
  // The features that follow the processors have gfx names too (gfx9, gfx10, gfx90a-insts).
  const std::string cpus = llc_help.substr(0, llc_help.find("Available features"));
  static const std::regex kGfx(R"(\b(gfx[0-9a-f]+)\s+-)");
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (auto it = std::sregex_iterator(cpus.begin(), cpus.end(), kGfx); it != std::sregex_iterator(); ++it) {
    if (seen.insert((*it)[1].str()).second) out.push_back((*it)[1].str());
  }
  return out;
}

fs::path rocm_device_lib_dir(const std::string& driver_output) {
  static const std::regex kIsa(R"re(([^"\s]*)/oclc_isa_version_[0-9a-f]+\.bc)re");
  std::smatch m;
  if (std::regex_search(driver_output, m, kIsa)) return fs::path(m[1].str());
  return {};
}

std::vector<std::string> rocm_buildable_archs(const std::vector<std::string>& known, const fs::path& dir,
                                              std::map<std::string, std::string>& unbuildable) {
  std::error_code ec;
  bool split = false;  // whether these device libraries have one ISA-version file per target
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().starts_with("oclc_isa_version_")) {
      split = true;
      break;
    }
  }
  if (!split) return known;
  std::vector<std::string> out;
  for (const auto& arch : known) {
    const std::string lib = "oclc_isa_version_" + arch.substr(arch.starts_with("gfx") ? 3 : 0) + ".bc";
    if (fs::exists(dir / lib, ec)) {
      out.push_back(arch);
    } else {
      unbuildable[arch] = "its ROCm device library " + lib + " is not in " + dir.string() +
                          " (hipcc's LLVM knows the target; the installed device libraries do not)";
    }
  }
  return out;
}

std::string compiler_release(Backend backend, const std::string& version_text) {
  static const std::regex kGcc(R"((\d+\.\d+(?:\.\d+)?)\s*$)"), kCuda(R"(release (\d+\.\d+))"),
      kHip(R"(HIP version: (\d+\.\d+))");
  const std::string first = version_text.substr(0, version_text.find('\n'));
  std::smatch m;
  switch (backend) {
    case Backend::kCpu: return std::regex_search(first, m, kGcc) ? m[1].str() : "";
    case Backend::kCuda: return std::regex_search(version_text, m, kCuda) ? m[1].str() : "";
    case Backend::kRocm: return std::regex_search(version_text, m, kHip) ? m[1].str() : "";
  }
  return "";
}

std::string cuda_native_arch(std::string compute_cap, const std::vector<std::string>& archs) {
  compute_cap.erase(std::remove(compute_cap.begin(), compute_cap.end(), '.'), compute_cap.end());
  const std::string specific = "sm_" + compute_cap + "a";
  return std::find(archs.begin(), archs.end(), specific) != archs.end() ? specific : "sm_" + compute_cap;
}

std::vector<std::string> Toolchain::arch_flags(const std::vector<std::string>& arch_list) const {
  std::vector<std::string> flags;
  switch (backend) {
    case Backend::kCpu:
      // Resolved targets always parse; the flags are the target's whole spelling.
      return CpuTarget::parse(arch_list.front(), isa_features, "/arch").value().flags();
    case Backend::kCuda:
      for (const auto& a : arch_list) {
        std::string num = a.substr(3);
        flags.push_back("-gencode");
        flags.push_back("arch=compute_" + num + ",code=[sm_" + num + ",compute_" + num + "]");
      }
      break;
    case Backend::kRocm:
      for (const auto& a : arch_list) flags.push_back("--offload-arch=" + a);
      break;
  }
  return flags;
}

std::vector<CompileStep> Toolchain::compile_steps(const std::vector<std::string>& arch_list,
                                                  const CompileOptions& o,
                                                  const std::string& source_file,
                                                  const std::vector<IncludeDir>& includes) const {
  std::vector<std::string> common{compiler.string(), "-std=c++17"};
  for (const auto& [name, value] : o.defines) common.push_back("-D" + name + (value ? "=" + *value : ""));
  for (const auto& inc : includes) common.push_back("-I" + inc.dir.string());
  std::vector<std::string> target_flags = arch_flags(arch_list);
  std::vector<std::string> shared_flags;
  switch (backend) {
    case Backend::kCpu:
      target_flags.insert(target_flags.end(), {"-fPIC", "-fopenmp"});
      shared_flags = {"-shared"};
      break;
    case Backend::kCuda:
      // constexpr host functions called from device code: CUTLASS/CuTe need it.
      target_flags.insert(target_flags.end(),
                        {"--expt-relaxed-constexpr", "-Xcompiler", "-fPIC", "-Xptxas", "-v"});
      shared_flags = {"-shared", "-cudart", "shared"};
      break;
    case Backend::kRocm:
      target_flags.insert(target_flags.end(), {"-fPIC", "-Rpass-analysis=kernel-resource-usage"});
      shared_flags = {"-shared", "-fPIC"};
      break;
  }
  auto cmd = common;
  add_opt_flags(cmd, o, backend);
  cmd.insert(cmd.end(), target_flags.begin(), target_flags.end());
  if (!o.aot) {
    cmd.insert(cmd.end(), shared_flags.begin(), shared_flags.end());
    cmd.insert(cmd.end(), {source_file, "-o", "kernel.so"});
    return {CompileStep{cmd, "kernel.so"}};
  }
  cmd.insert(cmd.end(), {"-c", source_file, "-o", "kernel.o"});
  return {CompileStep{cmd, "kernel.o"}, link_step(arch_list)};
}

CompileStep Toolchain::link_step(const std::vector<std::string>& arch_list) const {
  std::vector<std::string> link{compiler.string()};
  switch (backend) {
    case Backend::kCpu: link.insert(link.end(), {"-shared", "-fopenmp"}); break;
    case Backend::kCuda: link.insert(link.end(), {"-shared", "-cudart", "shared"}); break;
    case Backend::kRocm:
      for (auto& f : arch_flags(arch_list)) link.push_back(std::move(f));
      link.insert(link.end(), {"-shared", "-fPIC"});
      break;
  }
  link.insert(link.end(), {"kernel.o", "-o", "kernel.so"});
  return {link, "kernel.so"};
}

std::vector<std::string> Toolchain::child_env(const fs::path& job_dir) const {
  return {"PATH=" + search_path, "HOME=" + job_dir.string(), "TMPDIR=" + job_dir.string(), "LANG=C",
          "LC_ALL=C"};
}

nlohmann::json parse_resource_usage(Backend backend, const std::string& log,
                                    const std::vector<std::string>& archs) {
  nlohmann::json out = nlohmann::json::array();
  std::istringstream in(log);
  std::string line;
  std::smatch m;
  auto num = [](const std::string& s, const std::regex& re) -> nlohmann::json {
    std::smatch mm;
    if (std::regex_search(s, mm, re)) return std::stoll(mm[1].str());
    return nullptr;
  };
  if (backend == Backend::kCuda) {
    static const std::regex kEntry(R"(Compiling entry function '([^']+)' for '([^']+)')");
    static const std::regex kStack(R"((\d+) bytes stack frame)"),
        kSpillSt(R"((\d+) bytes spill stores)"), kSpillLd(R"((\d+) bytes spill loads)"),
        kRegs(R"(Used (\d+) registers)"), kSmem(R"((\d+) bytes smem)"),
        kBarriers(R"(used (\d+) barriers)");
    nlohmann::json* cur = nullptr;
    while (std::getline(in, line)) {
      if (std::regex_search(line, m, kEntry)) {
        out.push_back({{"function", m[1].str()},
                       {"arch", m[2].str()},
                       {"registers", nullptr},
                       {"spill_stores", 0},
                       {"spill_loads", 0},
                       {"stack_bytes", 0},
                       {"shared_bytes", 0},
                       {"barriers", 0}});
        cur = &out.back();
        continue;
      }
      if (!cur) continue;
      if (line.find("stack frame") != std::string::npos) {
        (*cur)["stack_bytes"] = num(line, kStack);
        (*cur)["spill_stores"] = num(line, kSpillSt);
        (*cur)["spill_loads"] = num(line, kSpillLd);
      } else if (line.find("Used ") != std::string::npos) {
        (*cur)["registers"] = num(line, kRegs);
        auto smem = num(line, kSmem);
        (*cur)["shared_bytes"] = smem.is_null() ? nlohmann::json(0) : smem;
        auto bar = num(line, kBarriers);
        (*cur)["barriers"] = bar.is_null() ? nlohmann::json(0) : bar;
      }
    }
  } else if (backend == Backend::kRocm) {
    static const std::regex kRemark(
        R"(remark:\s+(?:Function Name: (\S+)|\s*([A-Za-z ]+?)(?: \[[^\]]*\])?: (\d+)) )");
    nlohmann::json* cur = nullptr;
    while (std::getline(in, line)) {
      line += ' ';
      if (!std::regex_search(line, m, kRemark)) continue;
      if (m[1].matched) {
        out.push_back({{"function", m[1].str()}});
        cur = &out.back();
        continue;
      }
      if (!cur) continue;
      static const std::vector<std::pair<std::string, std::string>> kNames = {
          {"SGPRs", "sgprs"},
          {"VGPRs", "vgprs"},
          {"AGPRs", "agprs"},
          {"ScratchSize", "scratch_bytes_per_lane"},
          {"Occupancy", "occupancy_waves_per_simd"},
          {"SGPRs Spill", "sgpr_spills"},
          {"VGPRs Spill", "vgpr_spills"},
          {"LDS Size", "lds_bytes"}};
      for (const auto& [from, to] : kNames) {
        if (m[2].str() == from) (*cur)[to] = std::stoll(m[3].str());
      }
    }
    // clang compiles the offload targets in sorted order, one remark block each.
    std::vector<std::string> sorted = archs;
    std::sort(sorted.begin(), sorted.end());
    std::map<std::string, size_t> seen;
    size_t functions = 0;
    for (auto& e : out) functions += seen[e["function"]]++ == 0;
    if (!sorted.empty() && out.size() == functions * sorted.size()) {
      seen.clear();
      for (auto& e : out) e["arch"] = sorted[seen[e["function"]]++];
    }
  }
  return out;
}

Toolchains Toolchains::discover(const Spawner& spawn) {
  std::string path = env_or("PATH", kDefaultPath);
  Toolchains t({discover_cpu(spawn, path), discover_cuda(spawn, path), discover_rocm(spawn, path)});
  std::error_code ec;
  if (fs::path objcopy = locate("KFORGE_OBJCOPY", {}, "objcopy", path); !objcopy.empty())
    t.set_objcopy(fs::canonical(objcopy, ec));
  return t;
}

const Toolchain& Toolchains::get(Backend b) const {
  for (const auto& t : all_) {
    if (t.backend == b) return t;
  }
  throw std::logic_error("no toolchain entry for backend");
}

nlohmann::json Toolchains::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& t : all_) j[std::string(backend_name(t.backend))] = t.to_json();
  return j;
}

}  // namespace kforge::core
