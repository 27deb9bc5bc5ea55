// The reference gemm: one output element per loop iteration (cpu) or per thread (gpu),
// accumulating in double, then the same epilogue. Slow, simple and obviously right:
// verification compares the tuned kernels against it.
#include <sstream>

#include "core/templates/gemm.hpp"
#include "core/templates/render_util.hpp"

namespace kforge::core::templates {

std::string render_gemm_reference(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig,
                                  const EpilogueCode& ep) {
  Subst s;
  set_problem(s, p);
  s.set("TA", element_ctype(req.backend, p.ab)).set("TC", element_ctype(req.backend, p.out));
  s.set("A", sig.arg(0)).set("B", sig.arg(1)).set("C", sig.out_arg()).set("EPARGS", ep.args).set("EPPARAMS", ep.params);
  std::ostringstream src;
  src << prelude(req.backend) << "\nnamespace {\n" << problem_constants(s, p) << ep.function;
  const std::string body = R"(
  double acc = 0.0;
  for (int64_t k = 0; k < kK; ++k) {
    acc += double(kf_to_float(pa[offA + b * sAb + m * sAm + k * sAk])) * double(kf_to_float(pb[offB + b * sBb + k * sBk + n * sBn]));
  }
  kf_store(pc + offC + b * sCb + m * sCm + n * sCn, kf_epilogue(float(acc), b, m, n$EPARGS$));
)";
  if (req.backend == Backend::kCpu) {
    src << s.apply(R"(}  // namespace

extern "C" )") << sig.declaration() << s.apply(R"( {
  if (workspace_size) { *workspace_size = 0; return 0; }
$SHAPE_CHECK$)") << sig.null_checks("  ") << s.apply(R"(  const $TA$* pa = $A$;
  const $TA$* pb = $B$;
  $TC$* pc = $C$;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t m = 0; m < kM; ++m)
      for (int64_t n = 0; n < kN; ++n) {)" + body + R"(      }
  return 0;
}
)");
    return src.str();
  }
  const bool cuda = req.backend == Backend::kCuda;
  src << s.apply(R"(
__global__ void gemm_reference(const $TA$* __restrict__ pa, const $TA$* __restrict__ pb, $TC$* __restrict__ pc, int64_t M$EPPARAMS$) {
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t m = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t b = blockIdx.z;
  if (m >= M || n >= kN) return;)" + body + R"(}

}  // namespace

extern "C" )") << sig.declaration() << s.apply(R"( {
  if (workspace_size) { *workspace_size = 0; return 0; }
$SHAPE_CHECK$)") << sig.null_checks("  ") << s.apply(std::string(R"(  dim3 block(16, 16);
  dim3 grid(unsigned((kN + 15) / 16), unsigned((M + 15) / 16), unsigned(kBatch));
  gemm_reference<<<grid, block, 0, stream>>>($A$, $B$, $C$, M$EPARGS$);
  return )") + (cuda ? "cudaGetLastError() == cudaSuccess" : "hipGetLastError() == hipSuccess") + R"( ? 0 : 3;
}
)");
  return src.str();
}

}  // namespace kforge::core::templates
