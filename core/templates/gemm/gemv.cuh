// The cuda gemm for a few rows of C (M <= 8, decode) whose B has contiguous rows of any
// length (an odd N: rows that start on 2 bytes, which TMA cannot read and the wgmma kernel
// copies first). One kernel, no workspace: a block owns BN columns of C and a part of K; its
// threads stream B's rows in aligned 16-byte chunks (a row's BN columns touch BN / 8 + 1 of
// them), a thread always the same chunk of its rows, which lie 8 rows or a multiple of that
// apart, so that where a row starts within its first chunk (its phase) is the same for all of
// them: the thread sums A[m][k] times its chunk's 8 elements, and only at the end finds which
// column each of its 8 sums is (or none: a neighbour's columns, another row's elements). The
// block adds its threads' sums in shared memory (atomically: the order, and an output's last bit,
// may vary from run to run); with SPLIT > 1 the SPLIT blocks of a cluster
// (sm_90) take SPLIT parts of K and rank r adds up every block's sums for its share of the
// outputs through distributed shared memory, applies the epilogue and stores them. Rendered by
// gemm_cuda.cpp after the prelude, the problem's constants, T, TC and kf_epilogue.
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
constexpr int ROWS = THREADS / CHUNKS;       // rows a block reads at once, a thread each of its chunk
static_assert(BN % 8 == 0 && THREADS % CHUNKS == 0 && ROWS % 8 == 0, "a block reads whole chunks of 8-row groups");
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

__global__ void __launch_bounds__(THREADS) gemv(const T* __restrict__ A, const T* __restrict__ B, TC* __restrict__ C/*$EPPARAMS$*/) {
  __shared__ float sums[MR][BN];
  for (int i = threadIdx.x; i < MR * BN; i += THREADS) (&sums[0][0])[i] = 0.0f;
  const int part = SPLIT > 1 ? int(blockIdx.x) : 0;
  const int64_t n0 = int64_t(blockIdx.y) * BN;
  const int chunk = threadIdx.x % CHUNKS, lane_row = threadIdx.x / CHUNKS;
  // Element e of B (B + offB + e) lies in 16-byte chunk (e + skew) / 8 from `base`.
  const T* b = B + offB;
  const int64_t skew = int64_t(reinterpret_cast<uintptr_t>(b) % 16 / sizeof(T));
  const Chunk* base = reinterpret_cast<const Chunk*>(b - skew);
  const T* a = A + offA;
  const int64_t k_begin = part * KPART, k_end = k_begin + KPART < kK ? k_begin + KPART : kK;
  // The phase of this thread's rows: where column n0 of them starts in its first chunk.
  const int phase = int((skew + (k_begin + lane_row) * sBk + n0) % 8);
  float acc[MR][8] = {};
  for (int64_t k0 = k_begin + lane_row; k0 < k_end; k0 += int64_t(ROWS) * UNROLL) {
    Chunk c[UNROLL];
    float x[UNROLL][MR];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t k = k0 + int64_t(u) * ROWS;
      c[u].v = make_uint4(0, 0, 0, 0);
      for (int m = 0; m < MR; ++m) x[u][m] = 0.0f;
      if (k >= k_end) continue;
      const int64_t first = skew + k * sBk + n0 - phase + 8 * chunk;  // the chunk's first element, from base
      if (first >= skew && first + 8 <= skew + SPAN) {
        c[u].v = __ldg(&base[first / 8].v);
      } else {  // B's first or last chunk, partly outside it: its elements one by one
        for (int e = 0; e < 8; ++e)
          if (first + e >= skew && first + e < skew + SPAN) c[u].e[e] = b[first + e - skew];
      }
#pragma unroll
      for (int m = 0; m < MR; ++m) x[u][m] = kf_to_float(a[m * sAm + k * sAk]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float v = kf_to_float(c[u].e[e]);
#pragma unroll
        for (int m = 0; m < MR; ++m) acc[m][e] = fmaf(x[u][m], v, acc[m][e]);
      }
  }
  __syncthreads();  // sums zeroed
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int col = 8 * chunk + e - phase;  // of the block's BN; outside them a neighbour's
    if (col < 0 || col >= BN) continue;
#pragma unroll
    for (int m = 0; m < MR; ++m) atomicAdd(&sums[m][col], acc[m][e]);
  }
  if constexpr (SPLIT > 1) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  } else {
    __syncthreads();
  }
  // Rank `part` adds up its share of the outputs from every block of the cluster.
  for (int i = part * THREADS + int(threadIdx.x); i < MR * BN; i += SPLIT * THREADS) {
    const int m = i / BN, col = i % BN;
    const int64_t n = n0 + col;
    if (n >= kN) continue;
    float v = 0.0f;
    if constexpr (SPLIT > 1) {
      const uint32_t local = uint32_t(__cvta_generic_to_shared(&sums[m][col]));
      for (int r = 0; r < SPLIT; ++r) {
        uint32_t remote;
        float s;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(r));
        asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(s) : "r"(remote) : "memory");
        v += s;
      }
    } else {
      v = sums[m][col];
    }
    kf_store(C + offC + m * sCm + n * sCn, kf_epilogue(v, 0, m, n/*$EPARGS$*/));
  }
  // No block leaves while another may still read its sums.
  if constexpr (SPLIT > 1) asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
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
