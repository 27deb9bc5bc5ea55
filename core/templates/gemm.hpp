// The `gemm` template: out = epilogue(A @ B), batched when the output has rank 3.
// A is inputs[0] ([M,K] or [B,M,K]), B is inputs[1] ([K,N] or [B,K,N]); any stride
// order, storage offsets, float32/float16/bfloat16, accumulation in float32. The other
// inputs feed the epilogue (`add`/`mul`), broadcast against [B,M,N] like torch.
// Backends: cpu (packed, cache-blocked, vectorized, OpenMP), cuda (on sm_90a, warp-specialized
// wgmma fed by TMA; elsewhere mma.sync tensor cores with a cp.async multi-stage pipeline for
// 16-bit types; SIMT for float32), rocm (MFMA on
// gfx908/gfx90a/gfx94x/gfx950, a plain LDS-tiled kernel elsewhere). render(reference=true) gives the
// naive one-output-per-thread kernel that verification trusts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/templates/kernel.hpp"
#include "core/templates/template.hpp"

namespace kforge::core::templates {

// A checked gemm request in the form the renderers use: everything as numbers.
struct GemmProblem {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  Dtype ab = Dtype::kFloat32, out = Dtype::kFloat32;
  // Element strides; batch strides are 0 where an operand is shared by every batch.
  int64_t sAb = 0, sAm = 0, sAk = 0, offA = 0;
  int64_t sBb = 0, sBk = 0, sBn = 0, offB = 0;
  int64_t sCb = 0, sCm = 0, sCn = 0, offC = 0;
  bool rank3 = false;
  bool any_m = false;  // the kernel takes M as an argument: runtime_m(), set by GemmTemplate::render
};

GemmProblem gemm_problem(const TemplateSpec& spec);

// How the Hopper kernel describes a 16-bit operand to the TMA unit: a 3-d tensor map over
// (contiguous dimension, the other one, batch), in elements. `kmajor` says whether the
// contiguous dimension is K. No stride is 0: a dimension of size 1 gets a packed stride.
struct TmaOperand {
  bool kmajor = true;
  int64_t inner = 0, outer = 0, batch = 1;
  int64_t outer_stride = 0, batch_stride = 0;
};
// nullopt (with the reason) where TMA cannot load the operand: neither M/N nor K has unit
// stride, or a stride or the offset is not a multiple of 16 bytes. operand 0 is A, 1 is B.
std::optional<TmaOperand> tma_operand(const GemmProblem& p, int operand, std::string* why = nullptr);

// The parts the Hopper kernel cuts K into for `split_k` (the splits left with K slices to do:
// 64-deep slices shared out evenly, so 5 slices asked to split 4 ways make 3 parts of 2 and 1).
int wgmma_splits(const GemmProblem& p, int split_k);

// Whether the kernel takes M at run time instead of being compiled for the request's M: the
// ABI's M then has no value, the source does not mention M, and one compile (one kernel key)
// serves every M. Where no stride depends on M: cuda with 16-bit operands (the tensor-core
// kernels and their reference), one batch, M >= 2 (a size-1 dimension's stride says nothing),
// and M the outermost dimension of every tensor that has one (A with unit K stride, C with
// unit N stride, epilogue inputs that are not broadcast over M), so the request's strides
// hold for any M. The caller's tensors then have the request's strides and M rows.
bool runtime_m(const TemplateRequest& req, const GemmProblem& p);

// The cuda kernel a request's params select.
enum class CudaMma { kMmaSync, kWgmma };
CudaMma cuda_mma(const nlohmann::json& params);

// The epilogue as C++: a function
//   KF_HD float kf_epilogue(float v, int64_t b, int64_t m, int64_t n, <extra params>)
// plus the parameter list and argument list for the epilogue inputs.
struct EpilogueCode {
  std::string function;
  std::string params;  // ", const float* __restrict__ e2" ... (leading comma)
  std::string args;    // ", e2" ...
};
// The reference rendering's epilogue is the plain formula of every op (erff for gelu); a CUDA
// kernel's gelu is kf_gelu_erf (see gemm.cpp).
EpilogueCode gemm_epilogue(const TemplateRequest& req, const KernelSignature& sig, bool reference);

// Per-backend renderers, in gemm_<backend>.cpp.
std::string render_gemm_cpu(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig,
                            const EpilogueCode& ep, uint64_t& workspace_bytes);
std::string render_gemm_cuda(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig,
                             const EpilogueCode& ep, uint64_t& workspace_bytes);
std::string render_gemm_rocm(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig,
                             const EpilogueCode& ep);
std::string render_gemm_reference(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig,
                                  const EpilogueCode& ep);

// Vector registers the cpu micro-kernel holds at once: mr x nr/vec accumulators, nr/vec
// B vectors and one broadcast A value.
int cpu_registers_needed(int mr, int nr, int vec);
// Shared memory per block an arch allows (bytes), for the cuda and rocm checks.
int64_t cuda_smem_limit(const std::string& arch);

class GemmTemplate final : public Template {
 public:
  std::string name() const override { return "gemm"; }
  std::string description() const override;
  std::vector<ParamSpec> params(const TemplateRequest& req) const override;
  std::vector<nlohmann::json> default_choices(const TemplateRequest& req) const override;
  Result<void> check(TemplateRequest& req) const override;
  Result<Rendered> render(const TemplateRequest& req, bool reference) const override;
};

}  // namespace kforge::core::templates
