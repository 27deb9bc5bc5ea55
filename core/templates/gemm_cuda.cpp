// The cuda gemm. float16/bfloat16: mma.sync.m16n8k16 tensor-core tiles fed by ldmatrix
// from padded shared memory, a `stages`-deep cp.async pipeline, and a shared-memory layout
// per operand chosen from its strides (K-major tiles load with ldmatrix, M- or N-major
// tiles with ldmatrix.trans), so row- and column-major operands both stream 16-byte
// vectors. Chunks that straddle an edge, unaligned bases and non-unit strides fall back to
// element loads. float32: a SIMT kernel with register tiles.
#include <sstream>

#include "core/templates/gemm.hpp"
#include "core/templates/render_util.hpp"

namespace kforge::core::templates {
namespace {

// What a tile's contiguous dimension is, from the operand's strides.
struct Layouts {
  bool a_mmajor = false;  // A tile stored [k][m] (A column-major)
  bool b_kmajor = false;  // B tile stored [n][k] (B column-major, i.e. transposed)
  bool a_vec = false, b_vec = false;  // 16-byte vectors possible (beyond the runtime alignment check)
};

Layouts layouts(const GemmProblem& p) {
  Layouts l;
  l.a_mmajor = p.sAm == 1 && p.sAk != 1;
  l.b_kmajor = p.sBk == 1 && p.sBn != 1;
  auto aligned8 = [](std::initializer_list<int64_t> v) {
    for (int64_t x : v) if (x % 8 != 0) return false;
    return true;
  };
  l.a_vec = (l.a_mmajor ? p.sAm == 1 && aligned8({p.sAk}) : p.sAk == 1 && aligned8({p.sAm})) && aligned8({p.sAb, p.offA});
  l.b_vec = (l.b_kmajor ? p.sBk == 1 && aligned8({p.sBn}) : p.sBn == 1 && aligned8({p.sBk})) && aligned8({p.sBb, p.offB});
  return l;
}

constexpr const char* kTensorCoreKernel = R"(
constexpr int BM = $bm$, BN = $bn$, BK = $bk$, WARPS = $warps$, STAGES = $stages$;
constexpr int THREADS = WARPS * 32;
constexpr int WM = WARPS >= 4 ? 2 : 1, WN = WARPS / WM;
constexpr int WTM = BM / WM, WTN = BN / WN;
constexpr int MI = WTM / 16, NI = WTN / 8;
constexpr int PAD = 8;  // elements; keeps ldmatrix rows 16-byte aligned and off each other's banks
constexpr bool A_MMAJOR = $a_mmajor$, B_KMAJOR = $b_kmajor$;
// Tile shapes as stored: [rows][cols + PAD], cols contiguous.
constexpr int A_ROWS = A_MMAJOR ? BK : BM, A_COLS = A_MMAJOR ? BM : BK;
constexpr int B_ROWS = B_KMAJOR ? BN : BK, B_COLS = B_KMAJOR ? BK : BN;
constexpr int A_TILE = A_ROWS * (A_COLS + PAD), B_TILE = B_ROWS * (B_COLS + PAD);
constexpr int SMEM_BYTES = STAGES * (A_TILE + B_TILE) * int(sizeof(T));

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Copies the [rows][cols] tile at (row0, col0) of a strided operand into shared memory.
template <int ROWS, int COLS, bool VEC>
__device__ __forceinline__ void load_tile(T* __restrict__ s, const T* __restrict__ g, int64_t row0, int64_t nrows,
                                          int64_t srow, int64_t col0, int64_t ncols, int64_t scol) {
  constexpr int CHUNKS = ROWS * COLS / 8;
  for (int c = threadIdx.x; c < CHUNKS; c += THREADS) {
    const int r = c / (COLS / 8), cc = (c % (COLS / 8)) * 8;
    const int64_t gr = row0 + r, gc = col0 + cc;
    T* dst = s + r * (COLS + PAD) + cc;
    if (VEC && gr < nrows && gc + 8 <= ncols) {
      cp_async16(dst, g + gr * srow + gc);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float v = gr < nrows && gc + e < ncols ? kf_to_float(g[gr * srow + (gc + e) * scol]) : 0.0f;
        kf_store(dst + e, v);
      }
    }
  }
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const T* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const T* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.$mma_type$.$mma_type$.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <bool VEC_A, bool VEC_B>
__global__ void __launch_bounds__(THREADS) gemm_tc(const T* __restrict__ A, const T* __restrict__ B, TC* __restrict__ C$EPPARAMS$) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const As = reinterpret_cast<T*>(smem_raw);
  T* const Bs = As + STAGES * A_TILE;
  const int64_t b = blockIdx.z;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const T* Ab = A + offA + b * sAb;
  const T* Bb = B + offB + b * sBb;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WN, wn = warp % WN;
  const int g = lane / 8, r = lane % 8;

  auto load_stage = [&](int stage, int64_t kt) {
    const int64_t k0 = kt * BK;
    if (A_MMAJOR) load_tile<A_ROWS, A_COLS, VEC_A>(As + stage * A_TILE, Ab, k0, kK, sAk, m0, kM, sAm);
    else load_tile<A_ROWS, A_COLS, VEC_A>(As + stage * A_TILE, Ab, m0, kM, sAm, k0, kK, sAk);
    if (B_KMAJOR) load_tile<B_ROWS, B_COLS, VEC_B>(Bs + stage * B_TILE, Bb, n0, kN, sBn, k0, kK, sBk);
    else load_tile<B_ROWS, B_COLS, VEC_B>(Bs + stage * B_TILE, Bb, k0, kK, sBk, n0, kN, sBn);
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  auto compute_stage = [&](int stage) {
    const T* as = As + stage * A_TILE;
    const T* bs = Bs + stage * B_TILE;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[MI][4];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int mb = wm * WTM + i * 16;
        if (A_MMAJOR) ldmatrix_x4_trans(af[i], as + (kk + (g / 2) * 8 + r) * (A_COLS + PAD) + mb + (g % 2) * 8);
        else ldmatrix_x4(af[i], as + (mb + (g % 2) * 8 + r) * (A_COLS + PAD) + kk + (g / 2) * 8);
      }
#pragma unroll
      for (int j = 0; j < NI; j += 2) {
        const int nb = wn * WTN + j * 8;
        uint32_t bf[4];
        if (B_KMAJOR) ldmatrix_x4(bf, bs + (nb + (g / 2) * 8 + r) * (B_COLS + PAD) + kk + (g % 2) * 8);
        else ldmatrix_x4_trans(bf, bs + (kk + (g % 2) * 8 + r) * (B_COLS + PAD) + nb + (g / 2) * 8);
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          mma16816(acc[i][j], af[i], bf[0], bf[1]);
          mma16816(acc[i][j + 1], af[i], bf[2], bf[3]);
        }
      }
    }
  };

  const int64_t ktiles = (kK + BK - 1) / BK;
  if constexpr (STAGES == 1) {
    for (int64_t kt = 0; kt < ktiles; ++kt) {
      load_stage(0, kt);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
      compute_stage(0);
      __syncthreads();
    }
  } else {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < ktiles) load_stage(s, s);
      cp_async_commit();
    }
    for (int64_t kt = 0; kt < ktiles; ++kt) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // tile kt has landed, and everyone is done with tile kt - 1
      const int64_t next = kt + STAGES - 1;
      if (next < ktiles) load_stage(int(next % STAGES), next);
      cp_async_commit();
      compute_stage(int(kt % STAGES));
    }
    cp_async_wait<0>();
  }

#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t m = m0 + wm * WTM + i * 16 + lane / 4 + (e / 2) * 8;
        const int64_t n = n0 + wn * WTN + j * 8 + 2 * (lane % 4) + (e % 2);
        if (m < kM && n < kN) kf_store(C + offC + b * sCb + m * sCm + n * sCn, kf_epilogue(acc[i][j][e], b, m, n$EPARGS$));
      }
}

template <bool VEC_A, bool VEC_B>
cudaError_t launch(const T* A, const T* B, TC* C$EPPARAMS$, cudaStream_t stream) {
  static bool configured = false;  // the attribute is per kernel; set once per process
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(gemm_tc<VEC_A, VEC_B>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  dim3 grid(unsigned((kN + BN - 1) / BN), unsigned((kM + BM - 1) / BM), unsigned(kBatch));
  gemm_tc<VEC_A, VEC_B><<<grid, THREADS, SMEM_BYTES, stream>>>(A, B, C$EPARGS$);
  return cudaGetLastError();
}

}  // namespace

extern "C" $DECL$ {
  if (workspace_size) { *workspace_size = 0; return 0; }
  if (M != kM || N != kN || K != kK || batch != kBatch) return 2;  // compiled for one shape
$NULLCHECKS$  // 16-byte vectors need 16-byte aligned bases as well as the strides checked at render time.
  const bool va = $a_vec$ && reinterpret_cast<uintptr_t>($A$) % 16 == 0;
  const bool vb = $b_vec$ && reinterpret_cast<uintptr_t>($B$) % 16 == 0;
  cudaError_t e = va ? (vb ? launch<true, true>($A$, $B$, $C$$EPARGS$, stream) : launch<true, false>($A$, $B$, $C$$EPARGS$, stream))
                     : (vb ? launch<false, true>($A$, $B$, $C$$EPARGS$, stream) : launch<false, false>($A$, $B$, $C$$EPARGS$, stream));
  return e == cudaSuccess ? 0 : 3;
}
)";

constexpr const char* kSimtKernel = R"(
constexpr int BM = $bm$, BN = $bn$, BK = $bk$, THREADS = $warps$ * 32;
constexpr int PER = BM * BN / THREADS;
constexpr int TN = PER <= 16 ? 4 : 8, TX = BN / TN, TY = THREADS / TX, TM = BM / TY;
constexpr bool A_KFAST = $a_kfast$, B_KFAST = $b_kfast$;  // which index walks memory contiguously

__global__ void __launch_bounds__(THREADS) gemm_simt(const T* __restrict__ A, const T* __restrict__ B, TC* __restrict__ C$EPPARAMS$) {
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
      if (m < kM && n < kN) kf_store(C + offC + b * sCb + m * sCm + n * sCn, kf_epilogue(acc[i][j], b, m, n$EPARGS$));
    }
}

}  // namespace

extern "C" $DECL$ {
  if (workspace_size) { *workspace_size = 0; return 0; }
  if (M != kM || N != kN || K != kK || batch != kBatch) return 2;  // compiled for one shape
$NULLCHECKS$  dim3 grid(unsigned((kN + BN - 1) / BN), unsigned((kM + BM - 1) / BM), unsigned(kBatch));
  gemm_simt<<<grid, THREADS, 0, stream>>>($A$, $B$, $C$$EPARGS$);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
)";

}  // namespace

std::string render_gemm_cuda(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig,
                             const EpilogueCode& ep) {
  const auto& q = req.spec.params;
  Subst s;
  set_problem(s, p);
  s.set("bm", q["block_m"].get<int>()).set("bn", q["block_n"].get<int>()).set("bk", q["block_k"].get<int>());
  s.set("warps", q["warps"].get<int>()).set("stages", q["stages"].get<int>());
  s.set("A", sig.arg(0)).set("B", sig.arg(1)).set("C", sig.out_arg());
  s.set("EPARGS", ep.args).set("EPPARAMS", ep.params);
  s.set("DECL", sig.declaration()).set("NULLCHECKS", sig.null_checks("  "));
  const Layouts l = layouts(p);
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  s.set("a_mmajor", b(l.a_mmajor)).set("b_kmajor", b(l.b_kmajor)).set("a_vec", b(l.a_vec)).set("b_vec", b(l.b_vec));
  s.set("a_kfast", b(p.sAk == 1)).set("b_kfast", b(p.sBk == 1 && p.sBn != 1));
  s.set("mma_type", p.ab == Dtype::kBFloat16 ? "bf16" : "f16");
  std::ostringstream src;
  src << prelude(req.backend) << "\nnamespace {\n" << problem_constants(s)
      << "using T = " << element_ctype(req.backend, p.ab) << ";\nusing TC = " << element_ctype(req.backend, p.out) << ";\n"
      << ep.function << s.apply(p.ab == Dtype::kFloat32 ? kSimtKernel : kTensorCoreKernel);
  return src.str();
}

}  // namespace kforge::core::templates
