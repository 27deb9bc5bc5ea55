// The cuda gemm for a few rows of C (M <= 8, decode) whose B has contiguous rows of any
// length (an odd N: rows that start on 2 bytes, which TMA cannot read and the wgmma kernel
// copies first). One kernel, no workspace: a block owns BN columns of C and a part of K; its
// threads stream B's rows in aligned 16-byte chunks (a row's BN columns touch BN / 8 + 1 of
// them), a thread always the same chunk of its rows, which lie 8 rows or a multiple of that
// apart, so that where a row starts within its first chunk (its phase) is the same for all of
// them: the thread sums A[m][k] times its chunk's 8 elements, and only at the end finds which
// column each of its 8 sums is (or none: a neighbour's columns, another row's elements). A
// thread issues a step's `stages` loads of B and A before it converts any (a conversion right
// after its load waits for it: one memory round trip a row). A warp's rows share a phase, so its
// lanes of one chunk add up by shuffles, and the block adds up its warps' sums of each column in
// shared memory in a fixed order: no atomics (the shared-memory float adds, all rows on a few
// columns, took 2.6 of 8.0 us at 1x1025x2752 on the H200), and the same result every run. With
// SPLIT > 1 the SPLIT blocks of a cluster (sm_90) take SPLIT parts of K and rank r adds up
// every block's sums for its share of the outputs through distributed shared memory, in rank
// order, applies the epilogue and stores them. Rendered by gemm_cuda.cpp after the prelude,
// the problem's constants, T, TC and kf_epilogue.
//
// A kernel file (docs/TEMPLATES.md, "Kernel files"): the renderer takes the text of each
// `// @section NAME` ... `// @end NAME` block, keeps the first branch of its
// `#ifdef KFORGE_RENDERED` alternatives, and substitutes `$name$` (a value; a macro defined
// below in a compile on its own) and `/*$name$*/` (generated code, such as the epilogue's
// arguments; nothing in a compile on its own). Everything outside the sections is there only
// so that this file compiles on its own (tests/integration/kernel_files_test.cpp):
//   nvcc -std=c++17 --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -x cu -c gemv.cuh -o gemv.o
#include "../prelude/cuda.cuh"

namespace {
#include "standalone.h"
using T = half;
using TC = half;
// The placeholders, for a compile on its own.
#define $bn$ 56
#define $warps$ 8
#define $stages$ 8
#define $split_k$ 4
#define $rows$ 2
// The signature KernelSignature writes, for tensors A, B and C.
#define $DECL$ PT_EXPORT int KERNEL_NAME(const half* in_ptr0, const half* in_ptr1, half* out_ptr0, \
    int64_t M, int64_t N, int64_t K, int64_t batch, size_t* workspace_size, uint8_t* workspace, cudaStream_t stream)
#define $A$ in_ptr0
#define $B$ in_ptr1
#define $C$ out_ptr0

// @section gemv

namespace gv {
constexpr int BN = $bn$, THREADS = $warps$ * 32, UNROLL = $stages$, SPLIT = $split_k$;
constexpr int MR = $rows$;  // rows of C: M (a compile on its own: 2 of the 256)
constexpr int CHUNKS = BN / 8 + 1;           // 16-byte chunks of a row that BN columns touch
constexpr int WARPS = $warps$, ROWS = THREADS / CHUNKS;  // rows a block reads at once, a thread each of its chunk
constexpr int WARP_ROWS = 32 / CHUNKS;       // rows a warp reads at once
static_assert(BN % 8 == 0 && 32 % CHUNKS == 0 && WARPS % 8 == 0, "a warp reads whole rows, 8 warps or a multiple");
static_assert(MR >= 1 && MR <= 8 && MR <= kM && kBatch == 1 && sBn == 1, "a few rows of C, one batch, B's rows contiguous");
static_assert(SPLIT >= 1 && SPLIT <= 8, "a cluster of at most 8 blocks");
// Each block's part of K: whole groups of ROWS rows.
constexpr int64_t KPART = ((kK + SPLIT - 1) / SPLIT + ROWS - 1) / ROWS * ROWS;
// B's elements from the first to the last, which bound the chunks read whole.
constexpr int64_t SPAN = (kK - 1) * sBk + kN;

union Chunk {
  uint4 v;
  T e[8];
};

// Rank r's copy, in distributed shared memory (sm_90), of an address in this block's shared memory.
__device__ __forceinline__ uint32_t cluster_addr(const void* local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(uint32_t(__cvta_generic_to_shared(local))), "r"(rank));
  return remote;
}

__global__ void __launch_bounds__(THREADS) gemv(const T* __restrict__ A, const T* __restrict__ B, TC* __restrict__ C/*$EPPARAMS$*/) {
  __shared__ float warp_sums[MR][WARPS][CHUNKS * 8];  // each warp's sums of its chunks' elements
  __shared__ float sums[SPLIT > 1 ? MR * BN : 1];     // [m][col]: the block's, read by the cluster
  const int part = SPLIT > 1 ? int(blockIdx.x) : 0;
  const int64_t n0 = int64_t(blockIdx.y) * BN;
  // A warp's rows lie 8 apart, so that they share a phase (below): warp w reads rows w % 8 + 8 j.
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, chunk = lane % CHUNKS;
  const int lane_row = warp % 8 + 8 * (lane / CHUNKS + WARP_ROWS * (warp / 8));
  // Element e of B (B + offB + e) lies in 16-byte chunk (e + skew) / 8 from `base`.
  const T* b = B + offB;
  const int64_t skew = int64_t(reinterpret_cast<uintptr_t>(b) % 16 / sizeof(T));
  const Chunk* base = reinterpret_cast<const Chunk*>(b - skew);
  const T* a = A + offA;
  const int64_t k_begin = part * KPART, k_end = k_begin + KPART < kK ? k_begin + KPART : kK;
  // The phase of rows r + 8 j: where column n0 of them starts in their first chunk.
  const auto phase_of = [&](int r) { return int((skew + (k_begin + r) * sBk + n0) % 8); };
  const int phase = phase_of(lane_row);
  constexpr int64_t STEP = int64_t(ROWS) * sBk;  // elements from a thread's row to its next
  float acc[MR][8] = {};
  for (int64_t k0 = k_begin + lane_row; k0 < k_end; k0 += int64_t(ROWS) * UNROLL) {
    Chunk c[UNROLL];
    T x[UNROLL][MR];
    const int64_t first0 = skew + k0 * sBk + n0 - phase + 8 * chunk;  // the first chunk's first element, from base
    // Every load is issued before any is used (a conversion right after a load waits for it).
    if (sBk >= 0 && k0 + int64_t(ROWS) * (UNROLL - 1) < k_end && first0 >= skew && first0 + STEP * (UNROLL - 1) + 8 <= skew + SPAN) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) c[u].v = __ldg(&base[uint64_t(first0 + STEP * u) / 8].v);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int m = 0; m < MR; ++m) x[u][m] = a[m * sAm + (k0 + int64_t(u) * ROWS) * sAk];
    } else {  // K's end, or B's first or last chunk, partly outside it (that chunk element by element)
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int64_t k = k0 + int64_t(u) * ROWS, first = first0 + STEP * u;
        c[u].v = make_uint4(0, 0, 0, 0);
        for (int m = 0; m < MR; ++m) x[u][m] = T(0.0f);
        if (k >= k_end) continue;
        if (first >= skew && first + 8 <= skew + SPAN) {
          c[u].v = __ldg(&base[uint64_t(first) / 8].v);
        } else {
          for (int e = 0; e < 8; ++e)
            if (first + e >= skew && first + e < skew + SPAN) c[u].e[e] = b[first + e - skew];
        }
        for (int m = 0; m < MR; ++m) x[u][m] = a[m * sAm + k * sAk];
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float v = kf_to_float(c[u].e[e]);
#pragma unroll
        for (int m = 0; m < MR; ++m) acc[m][e] = fmaf(kf_to_float(x[u][m]), v, acc[m][e]);
      }
  }
  // A warp's lanes of one chunk hold sums of the same columns: add them up (shuffles), then add
  // up the warps' sums of each column, in a fixed order (no atomics: the same sums every run).
#pragma unroll
  for (int m = 0; m < MR; ++m)
#pragma unroll
    for (int e = 0; e < 8; ++e)
#pragma unroll
      for (int off = CHUNKS; off < 32; off *= 2) acc[m][e] += __shfl_xor_sync(0xffffffffu, acc[m][e], off);
  if (lane < CHUNKS)
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
      for (int e = 0; e < 8; ++e) warp_sums[m][warp][8 * chunk + e] = acc[m][e];
  __syncthreads();
  const auto block_sum = [&](int i) {  // output i (row i / BN, column i % BN) of the block's
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) v += warp_sums[i / BN][w][i % BN + phase_of(w % 8)];
    return v;
  };
  const auto store = [&](int i, float v) {
    const int m = i / BN;
    const int64_t n = n0 + i % BN;
    if (n < kN) kf_store(C + offC + m * sCm + n * sCn, kf_epilogue(v, 0, m, n/*$EPARGS$*/));
  };
  if constexpr (SPLIT == 1) {
    for (int i = int(threadIdx.x); i < MR * BN; i += THREADS) store(i, block_sum(i));
  } else {
    for (int i = int(threadIdx.x); i < MR * BN; i += THREADS) sums[i] = block_sum(i);
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    // Rank `part` adds up its share of the outputs from every block of the cluster, in rank order.
    for (int i = part * THREADS + int(threadIdx.x); i < MR * BN; i += SPLIT * THREADS) {
      float v = 0.0f;
      for (int r = 0; r < SPLIT; ++r) {
        float s;
        asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(s) : "r"(cluster_addr(&sums[i], uint32_t(r))) : "memory");
        v += s;
      }
      store(i, v);
    }
    // No block leaves while another may still read its sums.
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  }
}

cudaError_t run(const T* A, const T* B, TC* C/*$EPPARAMS$*/, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(SPLIT), unsigned((kN + BN - 1) / BN), 1);
  config.blockDim = dim3(THREADS, 1, 1);
  config.stream = stream;
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = SPLIT, cluster[0].val.clusterDim.y = 1, cluster[0].val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = SPLIT > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&config, gemv, A, B, C/*$EPARGS$*/);
}
}  // namespace gv

}  // namespace

extern "C" $DECL$ {
  if (workspace_size) { *workspace_size = 0; return 0; }
/*$SHAPE_CHECK$*//*$NULLCHECKS$*/  return gv::run($A$, $B$, $C$/*$EPARGS$*/, stream) == cudaSuccess ? 0 : 3;
}
// @end gemv
