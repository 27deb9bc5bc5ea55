// The cuda gemm for float32 operands: SIMT, shared-memory tiles of BM x BK and BK x BN, an
// outputs-per-thread register tile. Rendered by gemm_cuda.cpp after the prelude, the
// problem's constants, T, TC and kf_epilogue.
//
// A kernel file (docs/TEMPLATES.md, "Kernel files"): the renderer takes the text of each
// `// @section NAME` ... `// @end NAME` block, keeps the first branch of its
// `#ifdef KFORGE_RENDERED` alternatives, and substitutes `$name$` (a value; a macro defined
// below in a compile on its own) and `/*$name$*/` (generated code, such as the epilogue's
// arguments; nothing in a compile on its own). Everything outside the sections is there only
// so that this file compiles on its own (tests/integration/kernel_files_test.cpp):
//   nvcc -std=c++17 --expt-relaxed-constexpr -arch=sm_80 -x cu -c simt.cuh -o simt.o
#include "../prelude/cuda.cuh"

namespace {
#include "standalone.h"
using T = float;
using TC = float;
// The placeholders, for a compile on its own.
#define $bm$ 64
#define $bn$ 64
#define $bk$ 16
#define $warps$ 4
#define $a_kfast$ true
#define $b_kfast$ false
// The signature KernelSignature writes, for tensors A, B and C.
#define $DECL$ PT_EXPORT int KERNEL_NAME(const float* in_ptr0, const float* in_ptr1, float* out_ptr0, \
    int64_t M, int64_t N, int64_t K, int64_t batch, size_t* workspace_size, uint8_t* workspace, cudaStream_t stream)
#define $A$ in_ptr0
#define $B$ in_ptr1
#define $C$ out_ptr0

// @section simt

constexpr int BM = $bm$, BN = $bn$, BK = $bk$, THREADS = $warps$ * 32;
constexpr int PER = BM * BN / THREADS;
constexpr int TN = PER <= 16 ? 4 : 8, TX = BN / TN, TY = THREADS / TX, TM = BM / TY;
constexpr bool A_KFAST = $a_kfast$, B_KFAST = $b_kfast$;  // which index walks memory contiguously

__global__ void __launch_bounds__(THREADS) gemm_simt(const T* __restrict__ A, const T* __restrict__ B, TC* __restrict__ C/*$EPPARAMS$*/) {
  __shared__ float As[BK][BM + 4];
  __shared__ float Bs[BK][BN + 4];
  const int64_t b = blockIdx.z;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const T* Ab = A + offA + b * sAb;
  const T* Bb = B + offB + b * sBb;
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  float acc[TM][TN] = {};
  for (int64_t k0 = 0; k0 < kK; k0 += BK) {
    for (int idx = threadIdx.x; idx < BM * BK; idx += THREADS) {
      const int mm = A_KFAST ? idx / BK : idx % BM, kk = A_KFAST ? idx % BK : idx / BM;
      const int64_t m = m0 + mm, k = k0 + kk;
      As[kk][mm] = m < kM && k < kK ? kf_to_float(Ab[m * sAm + k * sAk]) : 0.0f;
    }
    for (int idx = threadIdx.x; idx < BN * BK; idx += THREADS) {
      const int nn = B_KFAST ? idx / BK : idx % BN, kk = B_KFAST ? idx % BK : idx / BN;
      const int64_t n = n0 + nn, k = k0 + kk;
      Bs[kk][nn] = n < kN && k < kK ? kf_to_float(Bb[k * sBk + n * sBn]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = As[kk][ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][tx * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int64_t m = m0 + ty * TM + i, n = n0 + tx * TN + j;
      if (m < kM && n < kN) kf_store(C + offC + b * sCb + m * sCm + n * sCn, kf_epilogue(acc[i][j], b, m, n/*$EPARGS$*/));
    }
}

}  // namespace

extern "C" $DECL$ {
  if (workspace_size) { *workspace_size = 0; return 0; }
/*$SHAPE_CHECK$*//*$NULLCHECKS$*/  dim3 grid(unsigned((kN + BN - 1) / BN), unsigned((kM + BM - 1) / BM), unsigned(kBatch));
  gemm_simt<<<grid, THREADS, 0, stream>>>($A$, $B$, $C$/*$EPARGS$*/);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
// @end simt
