// The cuda gemm for float16/bfloat16 before Hopper (and a Hopper kernel's fallback for
// misaligned views): mma.sync.m16n8k16 tensor-core tiles fed by ldmatrix from padded shared
// memory, a `stages`-deep cp.async pipeline, and a shared-memory layout per operand chosen
// from its strides (K-major tiles load with ldmatrix, M- or N-major tiles with ldmatrix.trans),
// so row- and column-major operands both stream 16-byte vectors. A tile whose rows do not
// start on 16 bytes (a row of an odd length, a view off its storage's alignment) streams too:
// cp.async lands each row's aligned 16-byte blocks (one more than the row has chunks, in the
// row's padding), and the block shifts the tile into place in shared memory before the warps
// read it; non-unit strides fall back to element loads. With `split_k` > 1 each block sums
// its part of K's tiles into float partial sums in the workspace, and splitk_reduce adds them
// up and applies the epilogue (the wgmma kernel's K split takes the same kernel). Rendered by
// gemm_cuda.cpp after the prelude, the problem's constants, T, TC and kf_epilogue: section
// `kernel` (namespace tc), then `entry`, which a wgmma kernel replaces with its own.
//
// A kernel file (docs/TEMPLATES.md, "Kernel files"): the renderer takes the text of each
// `// @section NAME` ... `// @end NAME` block, keeps the first branch of its
// `#ifdef KFORGE_RENDERED` alternatives, and substitutes `$name$` (a value; a macro defined
// below in a compile on its own) and `/*$name$*/` (generated code, such as the epilogue's
// arguments; nothing in a compile on its own). Everything outside the sections is there only
// so that this file compiles on its own (tests/integration/kernel_files_test.cpp):
//   nvcc -std=c++17 --expt-relaxed-constexpr -arch=sm_80 -x cu -c mma_sync.cuh -o mma_sync.o
#include "../prelude/cuda.cuh"

namespace {
#include "standalone.h"
using T = half;
using TC = half;
// The placeholders, for a compile on its own.
#define $bm$ 128
#define $bn$ 128
#define $bk$ 32
#define $warps$ 4
#define $stages$ 3
#define $mma_split_k$ 1
#define $a_mmajor$ false
#define $b_kmajor$ false
#define $a_vec$ true
#define $b_vec$ true
// The signature KernelSignature writes, for tensors A, B and C.
#define $DECL$ PT_EXPORT int KERNEL_NAME(const half* in_ptr0, const half* in_ptr1, half* out_ptr0, \
    int64_t M, int64_t N, int64_t K, int64_t batch, size_t* workspace_size, uint8_t* workspace, cudaStream_t stream)
#define $A$ in_ptr0
#define $B$ in_ptr1
#define $C$ out_ptr0

// @section kernel

namespace tc {
constexpr int BM = $bm$, BN = $bn$, BK = $bk$, WARPS = $warps$, STAGES = $stages$;
constexpr int64_t KTILES = (kK + BK - 1) / BK;
constexpr int64_t KPS = (KTILES + $mma_split_k$ - 1) / $mma_split_k$, SPLITS = (KTILES + KPS - 1) / KPS;  // K tiles a split; splits with work
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
// Split-K's partial sums lie as C does, so that storing them, adding them up and writing C
// all run along C's contiguous dimension: [S][batch][M][N] where C's rows are contiguous,
// [S][batch][N][M] where its columns are (W_COLUMNS: C^T, as a swapped wgmma problem stores
// a row-major C). The other way, each output of the sum went to its own 32-byte sector: at
// 459x4144x16424 swapped in 128x232 tiles, K split 2 (cuBLAS's tiling), the reduce took 36.7
// us for 1.9 M outputs and the gemm's partial stores wrote 2.5 M sectors (H200, ncu).
constexpr bool W_COLUMNS = sCm == 1 && sCn != 1;
__device__ __forceinline__ int64_t w_offset(int64_t M, int64_t m, int64_t n) { return W_COLUMNS ? n * M + m : m * kN + n; }

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Elements from a row's start to the 16-byte boundary before it: 0 where the row is aligned.
// Only the address's low bits matter, so 32-bit arithmetic does: `off` is the base's own
// misalignment (misalignment(g)), `at` the row's first element from the base.
__device__ __forceinline__ int misalignment(const T* p) { return int(reinterpret_cast<uintptr_t>(p) % 16) / int(sizeof(T)); }
__device__ __forceinline__ int misalignment(int off, int64_t at) { return int(uint32_t(off) + uint32_t(at)) % (16 / int(sizeof(T))); }

// The 8 elements at element `off` (0 to 7) of a 16-byte aligned address in shared memory, as
// four (five where off is odd) 32-bit loads funnel-shifted by half a word where off is odd.
__device__ __forceinline__ uint4 shifted8(const T* landed, int off) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(landed) + off / 2;
  const uint32_t shift = off % 2 != 0 ? 16 : 0;
  const uint32_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = shift != 0 ? w[4] : 0;
  return make_uint4(__funnelshift_r(w0, w1, shift), __funnelshift_r(w1, w2, shift), __funnelshift_r(w2, w3, shift),
                    __funnelshift_r(w3, w4, shift));
}

// Issues the copy of the [ROWS][COLS] tile at (row0, col0) of a strided operand into shared
// memory. VEC rows land in place, 16 bytes at a time; other rows with unit column stride land
// as the aligned 16-byte blocks around them, the first at the row's start (one block more than
// its chunks: the padding holds it), for Shifted to put in place once they have landed. Blocks
// wholly past the edges are not read; a block holding one of the row's elements lies in memory
// that is read anyway (the aligned 16 bytes of that element).
template <int ROWS, int COLS, bool VEC>
__device__ __forceinline__ void load_tile(T* __restrict__ s, const T* __restrict__ g, int64_t row0, int64_t nrows,
                                          int64_t srow, int64_t col0, int64_t ncols, int64_t scol) {
  static_assert(PAD == 8, "a misaligned row's extra 16-byte block lands in its padding");
  if constexpr (VEC) {
    constexpr int CHUNKS = ROWS * COLS / 8;
    for (int c = threadIdx.x; c < CHUNKS; c += THREADS) {
      const int r = c / (COLS / 8), cc = (c % (COLS / 8)) * 8;
      const int64_t gr = row0 + r, gc = col0 + cc;
      T* dst = s + r * (COLS + PAD) + cc;
      if (gr < nrows && gc + 8 <= ncols) {
        cp_async16(dst, g + gr * srow + gc);
      } else if (gr >= nrows || gc >= ncols) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) kf_store(dst + e, gr < nrows && gc + e < ncols ? kf_to_float(g[gr * srow + gc + e]) : 0.0f);
      }
    }
  } else if (scol == 1) {
    constexpr int BLOCKS = COLS / 8 + 1;
    const int base = misalignment(g);
    for (int c = threadIdx.x; c < ROWS * BLOCKS; c += THREADS) {
      const int r = c / BLOCKS, v = c % BLOCKS;
      const int64_t gr = row0 + r;
      const int off = misalignment(base, gr * srow + col0);
      if (gr >= nrows || (v == COLS / 8 && off == 0) || col0 - off + 8 * v >= ncols) continue;  // not needed, or past an edge
      cp_async16(s + r * (COLS + PAD) + 8 * v, g + (gr * srow + col0 - off + 8 * v));
    }
  }
}

// A !VEC tile put in place, in two steps so that it can be done where it landed: read() takes
// each of a thread's chunks from the landed blocks (shifted by its row's misalignment; a chunk
// that straddles an edge element by element, zeros past it; a non-unit column stride from
// global memory), and write(), after a barrier, stores them at their places.
template <int ROWS, int COLS>
struct Shifted {
  static constexpr int CHUNKS = ROWS * COLS / 8, PER = (CHUNKS + THREADS - 1) / THREADS;
  uint4 v[PER];

  __device__ __forceinline__ void read(const T* __restrict__ s, const T* __restrict__ g, int64_t row0, int64_t nrows,
                                       int64_t srow, int64_t col0, int64_t ncols, int64_t scol) {
    const int base = misalignment(g);
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int c = threadIdx.x + i * THREADS;
      if (CHUNKS % THREADS != 0 && c >= CHUNKS) break;
      const int r = c / (COLS / 8), cc = (c % (COLS / 8)) * 8;
      const int64_t gr = row0 + r, gc = col0 + cc;
      const T* const landed = s + r * (COLS + PAD) + cc;
      const int off = misalignment(base, gr * srow + col0);
      if (gr >= nrows || gc >= ncols) {
        v[i] = make_uint4(0, 0, 0, 0);
      } else if (scol == 1 && gc + 8 <= ncols) {
        v[i] = shifted8(landed, off);
      } else {
        alignas(16) T e8[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (gc + e >= ncols) kf_store(e8 + e, 0.0f);
          else e8[e] = scol == 1 ? landed[off + e] : g[gr * srow + (gc + e) * scol];
        }
        v[i] = *reinterpret_cast<const uint4*>(e8);
      }
    }
  }

  __device__ __forceinline__ void write(T* __restrict__ s) const {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int c = threadIdx.x + i * THREADS;
      if (CHUNKS % THREADS != 0 && c >= CHUNKS) break;
      *reinterpret_cast<uint4*>(s + (c / (COLS / 8)) * (COLS + PAD) + (c % (COLS / 8)) * 8) = v[i];
    }
  }
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const T* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const T* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef KFORGE_RENDERED
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.$mma_type$.$mma_type$.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
#else  // KFORGE_RENDERED
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
#endif  // KFORGE_RENDERED
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <bool VEC_A, bool VEC_B>
__global__ void __launch_bounds__(THREADS) gemm_tc(const T* __restrict__ A, const T* __restrict__ B, TC* __restrict__ C,
                                                   float* __restrict__ W, int64_t M/*$EPPARAMS$*/) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const As = reinterpret_cast<T*>(smem_raw);
  T* const Bs = As + STAGES * A_TILE;
  const int64_t b = blockIdx.z / SPLITS, split = blockIdx.z % SPLITS;  // batch, part of K
  const int64_t kt0 = split * KPS, ktiles = (kt0 + KPS < KTILES ? kt0 + KPS : KTILES) - kt0;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const T* Ab = A + offA + b * sAb;
  const T* Bb = B + offB + b * sBb;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WN, wn = warp % WN;
  const int g = lane / 8, r = lane % 8;

  auto load_stage = [&](int stage, int64_t kt) {
    const int64_t k0 = kt * BK;
    if (A_MMAJOR) load_tile<A_ROWS, A_COLS, VEC_A>(As + stage * A_TILE, Ab, k0, kK, sAk, m0, M, sAm);
    else load_tile<A_ROWS, A_COLS, VEC_A>(As + stage * A_TILE, Ab, m0, M, sAm, k0, kK, sAk);
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

  // A !VEC operand's landed tile, put in place (Shifted) by the whole block before it is read.
  auto shift_stage = [&](int stage, int64_t kt) {
    if constexpr (!VEC_A || !VEC_B) {
      const int64_t k0 = kt * BK;
      Shifted<A_ROWS, A_COLS> sa;
      Shifted<B_ROWS, B_COLS> sb;
      if constexpr (!VEC_A) {
        if (A_MMAJOR) sa.read(As + stage * A_TILE, Ab, k0, kK, sAk, m0, M, sAm);
        else sa.read(As + stage * A_TILE, Ab, m0, M, sAm, k0, kK, sAk);
      }
      if constexpr (!VEC_B) {
        if (B_KMAJOR) sb.read(Bs + stage * B_TILE, Bb, n0, kN, sBn, k0, kK, sBk);
        else sb.read(Bs + stage * B_TILE, Bb, k0, kK, sBk, n0, kN, sBn);
      }
      __syncthreads();  // every chunk read before any is overwritten
      if constexpr (!VEC_A) sa.write(As + stage * A_TILE);
      if constexpr (!VEC_B) sb.write(Bs + stage * B_TILE);
      __syncthreads();
    }
  };

  if constexpr (STAGES == 1) {
    for (int64_t kt = 0; kt < ktiles; ++kt) {
      load_stage(0, kt0 + kt);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
      shift_stage(0, kt0 + kt);
      compute_stage(0);
      __syncthreads();
    }
  } else {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < ktiles) load_stage(s, kt0 + s);
      cp_async_commit();
    }
    for (int64_t kt = 0; kt < ktiles; ++kt) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // tile kt has landed, and everyone is done with tile kt - 1
      const int64_t next = kt + STAGES - 1;
      if (next < ktiles) load_stage(int(next % STAGES), kt0 + next);
      cp_async_commit();
      shift_stage(int(kt % STAGES), kt0 + kt);
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
        if (m >= M || n >= kN) continue;
        if constexpr (SPLITS > 1) W[(split * kBatch + b) * M * kN + w_offset(M, m, n)] = acc[i][j][e];  // splitk_reduce's layout
        else kf_store(C + offC + b * sCb + m * sCm + n * sCn, kf_epilogue(acc[i][j][e], b, m, n/*$EPARGS$*/));
      }
}

// Four adjacent outputs of C at p, `step` elements apart: one store where they are adjacent
// and the address allows, else one each (`count` of them: a line's last quad may be short).
__device__ __forceinline__ void store_quad(TC* p, int64_t step, const float* v, int count) {
  struct alignas(4 * sizeof(TC)) Quad { TC e[4]; };
  if (step == 1 && count == 4 && reinterpret_cast<uintptr_t>(p) % sizeof(Quad) == 0) {
    Quad q;
#pragma unroll
    for (int e = 0; e < 4; ++e) kf_store(&q.e[e], v[e]);
    *reinterpret_cast<Quad*>(p) = q;
    return;
  }
  for (int e = 0; e < count; ++e) kf_store(p + e * step, v[e]);
}

// C = epilogue(the sum of the S partial sums in W), four adjacent outputs of a line a thread: a
// line is a row of C (kN outputs), or with W_COLUMNS a column (M). The wgmma kernel launches it
// as the gemm's programmatic dependent (DEPENDENT: it waits for the gemm's end and its writes
// with griddepcontrol.wait, sm_90 on); mma_sync after it.
__host__ __device__ __forceinline__ int64_t line_quads(int64_t M) { return ((W_COLUMNS ? M : kN) + 3) / 4; }
__host__ __device__ __forceinline__ int64_t reduce_quads(int64_t M) { return kBatch * (W_COLUMNS ? kN : M) * line_quads(M); }
template <int64_t S, bool DEPENDENT>
__global__ void __launch_bounds__(256) splitk_reduce(const float* __restrict__ W, TC* __restrict__ C, int64_t M/*$EPPARAMS$*/) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (DEPENDENT) asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const int64_t length = W_COLUMNS ? M : kN, lines = W_COLUMNS ? kN : M, per_line = line_quads(M);
  const int64_t slice = kBatch * M * kN, quads = reduce_quads(M);
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += int64_t(gridDim.x) * blockDim.x) {
    const int64_t line = q / per_line, i = (q % per_line) * 4, l = kBatch == 1 ? line : line % lines;
    const int b = kBatch == 1 ? 0 : int(line / lines);
    const int count = int(length - i < 4 ? length - i : 4);
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const float* w = W + line * length + i;
    if (length % 4 == 0) {
#pragma unroll
      for (int64_t s = 0; s < S; ++s) {
        const float4 x = *reinterpret_cast<const float4*>(w + s * slice);
        v[0] += x.x, v[1] += x.y, v[2] += x.z, v[3] += x.w;
      }
    } else {
      for (int64_t s = 0; s < S; ++s)
        for (int e = 0; e < count; ++e) v[e] += w[s * slice + e];
    }
    const int64_t m = W_COLUMNS ? i : l, n = W_COLUMNS ? l : i;
    for (int e = 0; e < count; ++e) v[e] = kf_epilogue(v[e], b, W_COLUMNS ? m + e : m, W_COLUMNS ? n : n + e/*$EPARGS$*/);
    store_quad(C + offC + int64_t(b) * sCb + m * sCm + n * sCn, W_COLUMNS ? sCm : sCn, v, count);
  }
}

// The partial sums' bytes for M rows (none without a K split).
size_t workspace_bytes(int64_t M) { return SPLITS > 1 ? size_t(SPLITS) * size_t(kBatch) * size_t(M) * size_t(kN) * 4 : 0; }

template <bool VEC_A, bool VEC_B>
cudaError_t launch(const T* A, const T* B, TC* C, float* W, int64_t M/*$EPPARAMS$*/, cudaStream_t stream) {
  static bool configured = false;  // the attribute is per kernel; set once per process
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(gemm_tc<VEC_A, VEC_B>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  dim3 grid(unsigned((kN + BN - 1) / BN), unsigned((M + BM - 1) / BM), unsigned(kBatch * SPLITS));
  gemm_tc<VEC_A, VEC_B><<<grid, THREADS, SMEM_BYTES, stream>>>(A, B, C, W, M/*$EPARGS$*/);
  if (SPLITS == 1) return cudaGetLastError();
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t quads = reduce_quads(M);
  splitk_reduce<SPLITS, false><<<unsigned(quads / 256 + 1 < 4096 ? quads / 256 + 1 : 4096), 256, 0, stream>>>(W, C, M/*$EPARGS$*/);
  return cudaGetLastError();
}

// 16-byte vectors need 16-byte aligned bases as well as the strides checked at render time.
cudaError_t run(const T* A, const T* B, TC* C, float* W, int64_t M/*$EPPARAMS$*/, cudaStream_t stream) {
  if (SPLITS > 1 && W == nullptr) return cudaErrorInvalidValue;  // the caller gave no workspace
  const bool va = $a_vec$ && reinterpret_cast<uintptr_t>(A) % 16 == 0;
  const bool vb = $b_vec$ && reinterpret_cast<uintptr_t>(B) % 16 == 0;
  return va ? (vb ? launch<true, true>(A, B, C, W, M/*$EPARGS$*/, stream) : launch<true, false>(A, B, C, W, M/*$EPARGS$*/, stream))
            : (vb ? launch<false, true>(A, B, C, W, M/*$EPARGS$*/, stream) : launch<false, false>(A, B, C, W, M/*$EPARGS$*/, stream));
}
}  // namespace tc
// @end kernel
// @section entry

}  // namespace

extern "C" $DECL$ {
  if (workspace_size) { *workspace_size = tc::workspace_bytes(M); return 0; }  // partial sums
/*$SHAPE_CHECK$*//*$NULLCHECKS$*/  return tc::run($A$, $B$, $C$, reinterpret_cast<float*>(workspace), M/*$EPARGS$*/, stream) == cudaSuccess ? 0 : 3;
}
// @end entry
