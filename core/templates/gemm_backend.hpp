// The gemm template's backends. The template (gemm.cpp) does what every backend shares — the
// parameter specs' checks, the shapes, the problem, the signature, the epilogue — and hands the
// rest to the request's backend through GemmBackend: its parameters and defaults, its default
// autotune choices, its checks and its rendering, which takes the kernel text from the kernel
// files of core/templates/gemm/ (kernel_file.hpp). One file per backend: gemm_cpu.cpp,
// gemm_cuda.cpp, gemm_rocm.cpp; they use gemm_problem.cpp, gemm_reference.cpp and the text tools,
// never gemm.cpp. Backends are stateless and thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/templates/gemm_problem.hpp"
#include "core/templates/kernel.hpp"

namespace kforge::core::templates {

// The allowed values of an int parameter (ParamSpec::allowed) from a list of ints.
inline std::vector<nlohmann::json> ints(std::initializer_list<int> v) { return {v.begin(), v.end()}; }

// Collects the errors of one check for one answer.
struct Problems {
  std::vector<FieldError> list;
  void add(std::string f, std::string m) { list.push_back({std::move(f), std::move(m)}); }
  Result<void> result() const {
    if (list.empty()) return {};
    Error e = Error::make(ErrorKind::kBadRequest, list.size() == 1 ? list[0].message : std::to_string(list.size()) + " problems with the gemm request");
    e.fields = list;
    return std::unexpected(e);
  }
};

// The epilogue as C++ (gemm_epilogue() in gemm.cpp): a function
//   KF_HD float kf_epilogue(float v, int64_t b, int64_t m, int64_t n, <extra params>)
// (after the gelu device functions it calls, if any) plus the parameter list and argument list
// for the epilogue inputs. `swapped` is the same function taking its output coordinates as
// (b, n, m), for a kernel that runs the transposed problem C^T = B^T A^T (cuda's swap_ab).
// `pair` applies it to two outputs at once,
//   KF_HD void kf_epilogue2(float& v0, float& v1, int64_t b, int64_t m, int64_t n, int64_t m1, int64_t n1, <extra params>)
// (the second at (m1, n1); swapped: (b, n, m, n1, m1)), for a kernel that stores outputs in
// pairs (cuda's wgmma), after `function` and with the backend's pair gelu where it has one.
struct EpilogueCode {
  std::string function, swapped;
  std::string pair, pair_swapped;
  std::string params;  // ", const float* __restrict__ e2" ... (leading comma)
  std::string args;    // ", e2" ...
};

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  // The parameters a request may give; defaults may follow the target (req.archs, req.cpu).
  virtual std::vector<ParamSpec> params(const TemplateRequest& req) const = 0;
  // The catalog of choices autotuning tries by default for this request.
  virtual std::vector<nlohmann::json> default_choices(const TemplateRequest& req) const = 0;
  // Completes the parameters a request gave before the specs' defaults fill in the rest (cuda:
  // `"mma": "wgmma"` brings the wgmma tiling). `params` is as the request held it (maybe not an object).
  virtual void complete_params(nlohmann::json& params) const { (void)params; }
  // The defaults that follow the problem, for a request that gave no params (cuda: the Hopper
  // tiling by problem size). Called once the parameters and shapes are checked, before check().
  virtual void choose_params(TemplateRequest& req, const GemmProblem& g) const { (void)req, (void)g; }
  // This backend's limits, on complete parameters and checked shapes; errors name the field.
  virtual void check(const TemplateRequest& req, const GemmProblem& g, Problems& p) const = 0;
  // Whether the kernel takes M at run time instead of being compiled for the request's M: the
  // ABI's M then has no value, the source does not mention kM, and one compile (one kernel key)
  // serves every M.
  virtual bool runtime_m(const TemplateRequest& req, const GemmProblem& g) const { (void)req, (void)g; return false; }
  // The device function a tuned kernel computes gelu with: it defines kf_gelu_erf (with `tanh`,
  // kf_gelu_tanh). Empty: the epilogue writes the formula, as the reference always does.
  virtual std::string gelu_function(bool tanh) const { (void)tanh; return {}; }
  // Its tanh gelu of two outputs at once, kf_gelu_tanh2(float& x, float& y), which a kernel's
  // kf_epilogue2 calls where it has one (after gelu_function(true)); empty: none.
  virtual std::string gelu_pair_function() const { return {}; }
  // The source of a checked request (g.any_m from runtime_m()); `reference`: the naive kernel
  // that verification compares against. Sets workspace_bytes where the kernel needs a workspace.
  virtual std::string render(const TemplateRequest& req, const GemmProblem& g, const KernelSignature& sig,
                             const EpilogueCode& ep, bool reference, uint64_t& workspace_bytes) const = 0;
};

const GemmBackend& gemm_cpu_backend();   // gemm_cpu.cpp
const GemmBackend& gemm_cuda_backend();  // gemm_cuda.cpp
const GemmBackend& gemm_rocm_backend();  // gemm_rocm.cpp

// cuda (gemm_cuda.cpp): the parts of K that the Hopper kernel's tail_split cuts each of `tail`
// tiles past its last full wave of `resident` blocks into, with `ktiles` 64-deep K slices (as
// gemm/wgmma.cuh's tail_parts() counts them at launch); 1: the tiles stay whole.
int64_t cuda_tail_parts(int64_t tail, int64_t resident, int64_t ktiles);

// The reference renderings (gemm_reference.cpp): one output per loop iteration (cpu, kernel file
// gemm/reference_cpu.inc) or per thread (gemm/reference.cuh, for cuda and rocm, whose launch
// check `launched` is, e.g., "cudaGetLastError() == cudaSuccess").
std::string render_reference_cpu(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig, const EpilogueCode& ep);
std::string render_reference_gpu(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig, const EpilogueCode& ep,
                                 const std::string& launched);

}  // namespace kforge::core::templates
