// The rocm gemm: LDS-tiled, one kernel for every arch of a fat binary. On CDNA (gfx908,
// gfx90a, gfx94x, gfx950) each wavefront computes its tile with 16x16 MFMA instructions
// (v_mfma_f32_16x16x16f16, ..._16x16x16bf16_1k on gfx90a+, ..._16x16x4f32); elsewhere
// (RDNA, older GCN) the same tiles are computed by plain FMAs. The launch configuration is
// the same for both, so the host code does not need to know which arch it runs on.
// Rendered by gemm_rocm.cpp after the prelude, the problem's constants, T, TC and
// kf_epilogue: section `head`, the MFMA step of the operands' dtype (`step_f16`, `step_bf16`
// or `step_f32`), then `kernel`.
//
// A kernel file (docs/TEMPLATES.md, "Kernel files"): the renderer takes the text of each
// `// @section NAME` ... `// @end NAME` block, keeps the first branch of its
// `#ifdef KFORGE_RENDERED` alternatives, and substitutes `$name$` (a value; a macro defined
// below in a compile on its own) and `/*$name$*/` (generated code, such as the epilogue's
// arguments; nothing in a compile on its own). Everything outside the sections is there only
// so that this file compiles on its own (tests/integration/kernel_files_test.cpp):
//   hipcc -std=c++17 --offload-arch=gfx90a -c rocm.hip -o rocm.o
#include "../prelude/rocm.hip"

namespace {
#include "standalone.h"
using T = _Float16;
using TC = _Float16;
// The placeholders, for a compile on its own.
#define $bm$ 64
#define $bn$ 64
#define $bk$ 16
#define $warps$ 4
#define $a_kfast$ true
#define $b_kfast$ false
#if defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__)
#define $mfma_cond$ 1
#else
#define $mfma_cond$ 0
#endif
// The signature KernelSignature writes, for tensors A, B and C.
#define $DECL$ PT_EXPORT int KERNEL_NAME(const _Float16* in_ptr0, const _Float16* in_ptr1, _Float16* out_ptr0, \
    int64_t M, int64_t N, int64_t K, int64_t batch, size_t* workspace_size, uint8_t* workspace, hipStream_t stream)
#define $A$ in_ptr0
#define $B$ in_ptr1
#define $C$ out_ptr0

// @section head

constexpr int BM = $bm$, BN = $bn$, BK = $bk$, WAVES = $warps$;
constexpr int THREADS = WAVES * 64;
constexpr int WM = WAVES >= 2 ? 2 : 1, WN = WAVES / WM;
constexpr int WTM = BM / WM, WTN = BN / WN, TI = WTM / 16, TJ = WTN / 16;
constexpr int LDK = BK + 4;  // padded row: LDS tiles are [rows][k]
constexpr bool A_KFAST = $a_kfast$, B_KFAST = $b_kfast$;

#if $mfma_cond$
#define KF_USE_MFMA 1
#else
#define KF_USE_MFMA 0
#endif

typedef float float4_t __attribute__((ext_vector_type(4)));
typedef _Float16 half4_t __attribute__((ext_vector_type(4)));
typedef short short4_t __attribute__((ext_vector_type(4)));

__device__ __forceinline__ short bf16_bits(float f) {
  hip_bfloat16 h(f);
  return static_cast<short>(h.data);
}

// @end head

// One MFMA step per dtype; a compile on its own checks all three and runs the float16 one.
namespace step_f16 {
// @section step_f16

constexpr int KSTEP = 16;
#if KF_USE_MFMA
__device__ __forceinline__ float4_t mfma_step(const float* ap, const float* bp, int lane, float4_t c) {
  const int k = 4 * (lane / 16);
  half4_t a = {_Float16(ap[k]), _Float16(ap[k + 1]), _Float16(ap[k + 2]), _Float16(ap[k + 3])};
  half4_t b = {_Float16(bp[k]), _Float16(bp[k + 1]), _Float16(bp[k + 2]), _Float16(bp[k + 3])};
  return __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, 0, 0, 0);
}
#endif
// @end step_f16
}  // namespace step_f16
namespace step_bf16 {
// @section step_bf16

constexpr int KSTEP = 16;
#if KF_USE_MFMA
__device__ __forceinline__ float4_t mfma_step(const float* ap, const float* bp, int lane, float4_t c) {
  const int k = 4 * (lane / 16);
  short4_t a = {bf16_bits(ap[k]), bf16_bits(ap[k + 1]), bf16_bits(ap[k + 2]), bf16_bits(ap[k + 3])};
  short4_t b = {bf16_bits(bp[k]), bf16_bits(bp[k + 1]), bf16_bits(bp[k + 2]), bf16_bits(bp[k + 3])};
  return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
}
#endif
// @end step_bf16
}  // namespace step_bf16
namespace step_f32 {
// @section step_f32

constexpr int KSTEP = 4;
#if KF_USE_MFMA
__device__ __forceinline__ float4_t mfma_step(const float* ap, const float* bp, int lane, float4_t c) {
  return __builtin_amdgcn_mfma_f32_16x16x4f32(ap[lane / 16], bp[lane / 16], c, 0, 0, 0);
}
#endif
// @end step_f32
}  // namespace step_f32
using namespace step_f16;

// @section kernel
__global__ void __launch_bounds__(THREADS) gemm_lds(const T* __restrict__ A, const T* __restrict__ B, TC* __restrict__ C/*$EPPARAMS$*/) {
  __shared__ float As[BM * LDK];
  __shared__ float Bs[BN * LDK];
  const int64_t b = blockIdx.z;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const T* Ab = A + offA + b * sAb;
  const T* Bb = B + offB + b * sBb;
#if KF_USE_MFMA
  const int wave = threadIdx.x / 64, lane = threadIdx.x % 64;
  const int wm = wave / WN, wn = wave % WN;
  float4_t acc[TI][TJ];
  for (int i = 0; i < TI; ++i)
    for (int j = 0; j < TJ; ++j) acc[i][j] = float4_t{0.0f, 0.0f, 0.0f, 0.0f};
#else
  constexpr int PER = BM * BN / THREADS;
  constexpr int TN = PER <= 16 ? 4 : 8, TX = BN / TN, TY = THREADS / TX, TM = BM / TY;
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  float acc[TM][TN] = {};
#endif
  for (int64_t k0 = 0; k0 < kK; k0 += BK) {
    for (int idx = threadIdx.x; idx < BM * BK; idx += THREADS) {
      const int mm = A_KFAST ? idx / BK : idx % BM, kk = A_KFAST ? idx % BK : idx / BM;
      const int64_t m = m0 + mm, k = k0 + kk;
      As[mm * LDK + kk] = m < kM && k < kK ? kf_to_float(Ab[m * sAm + k * sAk]) : 0.0f;
    }
    for (int idx = threadIdx.x; idx < BN * BK; idx += THREADS) {
      const int nn = B_KFAST ? idx / BK : idx % BN, kk = B_KFAST ? idx % BK : idx / BN;
      const int64_t n = n0 + nn, k = k0 + kk;
      Bs[nn * LDK + kk] = n < kN && k < kK ? kf_to_float(Bb[k * sBk + n * sBn]) : 0.0f;
    }
    __syncthreads();
#if KF_USE_MFMA
    // 16x16 tiles; lane l holds row/col l % 16 and k = kstep + 4 * (l / 16) + {0..3}
    // (16-bit types), or k = kstep + l / 16 (float32).
    for (int kk = 0; kk < BK; kk += KSTEP) {
      for (int i = 0; i < TI; ++i) {
        const float* ap = As + (wm * WTM + i * 16 + lane % 16) * LDK + kk;
        for (int j = 0; j < TJ; ++j) {
          const float* bp = Bs + (wn * WTN + j * 16 + lane % 16) * LDK + kk;
          acc[i][j] = mfma_step(ap, bp, lane, acc[i][j]);
        }
      }
    }
#else
    for (int kk = 0; kk < BK; ++kk) {
      float av[TM], bv[TN];
      for (int i = 0; i < TM; ++i) av[i] = As[(ty * TM + i) * LDK + kk];
      for (int j = 0; j < TN; ++j) bv[j] = Bs[(tx * TN + j) * LDK + kk];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
#endif
    __syncthreads();
  }
#if KF_USE_MFMA
  // D layout: lane l, element e -> row 4 * (l / 16) + e, column l % 16.
  for (int i = 0; i < TI; ++i)
    for (int j = 0; j < TJ; ++j)
      for (int e = 0; e < 4; ++e) {
        const int64_t m = m0 + wm * WTM + i * 16 + 4 * (lane / 16) + e;
        const int64_t n = n0 + wn * WTN + j * 16 + lane % 16;
        if (m < kM && n < kN) kf_store(C + offC + b * sCb + m * sCm + n * sCn, kf_epilogue(acc[i][j][e], b, m, n/*$EPARGS$*/));
      }
#else
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) {
      const int64_t m = m0 + ty * TM + i, n = n0 + tx * TN + j;
      if (m < kM && n < kN) kf_store(C + offC + b * sCb + m * sCm + n * sCn, kf_epilogue(acc[i][j], b, m, n/*$EPARGS$*/));
    }
#endif
}

}  // namespace

extern "C" $DECL$ {
  if (workspace_size) { *workspace_size = 0; return 0; }
/*$SHAPE_CHECK$*//*$NULLCHECKS$*/  dim3 grid(unsigned((kN + BN - 1) / BN), unsigned((kM + BM - 1) / BM), unsigned(kBatch));
  hipLaunchKernelGGL(gemm_lds, grid, dim3(THREADS), 0, stream, $A$, $B$, $C$/*$EPARGS$*/);
  return hipGetLastError() == hipSuccess ? 0 : 3;
}
// @end kernel
