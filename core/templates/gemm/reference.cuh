// The reference gemm of cuda and rocm: one output element per thread, accumulating in double,
// then the same epilogue. Slow, simple and obviously right: verification compares the tuned
// kernels against it. Rendered by gemm_reference.cpp after the prelude, the problem's
// constants and kf_epilogue, with $LAUNCHED$ the launch's check (cudaGetLastError() ==
// cudaSuccess, or hip's). The cpu's reference is reference_cpu.inc.
//
// A kernel file (docs/TEMPLATES.md, "Kernel files"): the renderer takes the text of each
// `// @section NAME` ... `// @end NAME` block, keeps the first branch of its
// `#ifdef KFORGE_RENDERED` alternatives, and substitutes `$name$` (a value; a macro defined
// below in a compile on its own) and `/*$name$*/` (generated code, such as the epilogue's
// arguments; nothing in a compile on its own). Everything outside the sections is there only
// so that this file compiles on its own (tests/integration/kernel_files_test.cpp):
//   nvcc -std=c++17 -arch=sm_80 -x cu -c reference.cuh -o reference.o
//   hipcc -std=c++17 --offload-arch=gfx90a -x hip -c reference.cuh -o reference.o
// The placeholders, for a compile on its own, by hipcc or nvcc.
#ifdef __HIPCC__
#include "../prelude/rocm.hip"
#define $LAUNCHED$ hipGetLastError() == hipSuccess
#define KF_STREAM hipStream_t
#else
#include "../prelude/cuda.cuh"
#define $LAUNCHED$ cudaGetLastError() == cudaSuccess
#define KF_STREAM cudaStream_t
#endif

namespace {
#include "standalone.h"
#define $TA$ float
#define $TC$ float
// The signature KernelSignature writes, for tensors A, B and C.
#define $DECL$ PT_EXPORT int KERNEL_NAME(const float* in_ptr0, const float* in_ptr1, float* out_ptr0, \
    int64_t M, int64_t N, int64_t K, int64_t batch, size_t* workspace_size, uint8_t* workspace, KF_STREAM stream)
#define $A$ in_ptr0
#define $B$ in_ptr1
#define $C$ out_ptr0

// @section reference

__global__ void gemm_reference(const $TA$* __restrict__ pa, const $TA$* __restrict__ pb, $TC$* __restrict__ pc, int64_t M/*$EPPARAMS$*/) {
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t m = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t b = blockIdx.z;
  if (m >= M || n >= kN) return;
  double acc = 0.0;
  for (int64_t k = 0; k < kK; ++k) {
    acc += double(kf_to_float(pa[offA + b * sAb + m * sAm + k * sAk])) * double(kf_to_float(pb[offB + b * sBb + k * sBk + n * sBn]));
  }
  kf_store(pc + offC + b * sCb + m * sCm + n * sCn, kf_epilogue(float(acc), b, m, n/*$EPARGS$*/));
}

}  // namespace

extern "C" $DECL$ {
  if (workspace_size) { *workspace_size = 0; return 0; }
/*$SHAPE_CHECK$*//*$NULLCHECKS$*/  dim3 block(16, 16);
  dim3 grid(unsigned((kN + 15) / 16), unsigned((M + 15) / 16), unsigned(kBatch));
  gemm_reference<<<grid, block, 0, stream>>>($A$, $B$, $C$, M/*$EPARGS$*/);
  return $LAUNCHED$ ? 0 : 3;
}
// @end reference
