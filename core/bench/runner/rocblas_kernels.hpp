// Which gfx targets a rocBLAS installation has GEMM kernels for, read from its Tensile library
// directory without loading rocBLAS or touching a GPU. rocBLAS aborts the whole process when
// the device's kernels are missing, so kforge-runner-rocm asks this first.
//   <dir of librocblas.so>/rocblas/<version>/library/   (Debian: rocblas/2.47.0/library)
//   <dir of librocblas.so>/rocblas/library/              (AMD's ROCm packages)
//   $ROCBLAS_TENSILE_LIBPATH                             (overrides both, as in rocBLAS)
// holding per-target files: Kernels.so-000-gfx90a-xnack-.hsaco, TensileLibrary_lazy_gfx942.dat,
// TensileLibrary_Type_..._gfx942.co, ...; a target is covered when a file names it.
#pragma once

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace kforge::runner {

inline std::filesystem::path rocblas_kernels_dir(const std::filesystem::path& librocblas, const std::string& version,
                                                 const char* env) {
  namespace fs = std::filesystem;
  if (env && *env) return env;
  std::error_code ec;
  const fs::path real = fs::canonical(librocblas, ec);
  const fs::path base = (ec ? librocblas : real).parent_path() / "rocblas";
  if (!version.empty() && fs::is_directory(base / version / "library", ec)) return base / version / "library";
  return base / "library";
}

// The gfx targets the files of `dir` name, sorted; empty when there is no such directory.
inline std::vector<std::string> rocblas_kernel_archs(const std::filesystem::path& dir) {
  static const std::regex kGfx("gfx[0-9a-f]+");
  std::set<std::string> archs;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    for (auto it = std::sregex_iterator(name.begin(), name.end(), kGfx); it != std::sregex_iterator(); ++it)
      archs.insert(it->str());
  }
  return {archs.begin(), archs.end()};
}

// Why rocBLAS cannot be the baseline on `arch` (a processor: gfx942), or "" when it can.
inline std::string rocblas_lacks(const std::vector<std::string>& archs, const std::string& arch,
                                 const std::string& version, const std::filesystem::path& dir) {
  if (std::find(archs.begin(), archs.end(), arch) != archs.end()) return "";
  std::string have;
  for (const auto& a : archs) have += (have.empty() ? "" : " ") + a;
  return "rocBLAS " + version + " has no kernels for " + arch + " in " + dir.string() +
         (have.empty() ? " (no kernel library there)" : " (it has: " + have + ")") +
         "; rocBLAS would abort the runner";
}

}  // namespace kforge::runner
