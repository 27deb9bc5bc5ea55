// The Hopper kernel (sm_90a), persistent over output tiles. One producer warpgroup, whose
// first thread issues TMA loads, and CONSUMERS (1 to 3) warpgroups that each own WG_M rows of
// the BM x BN tile and issue wgmma.m64n<BN>k16 straight from shared memory; a STAGES-deep ring
// of stages handed over with mbarriers (full: the TMA bytes landed; empty: every consumer's
// wgmmas that read the stage have completed). TMA zero-fills what lies past an edge, so
// ragged M, N and K need no special case; the epilogue guards its stores.
//
// The work is a list of units: an output tile, or with SPLIT_K > 1 one of the SPLITS parts of
// a tile's K range, whose float partial sums go to the workspace and are added up (and the
// epilogue applied) by the mma_sync kernel's tc::splitk_reduce, laid out along C's contiguous
// dimension (tc::W_COLUMNS: a swapped problem's C^T along its columns). The splits of a tile are
// adjacent units, so they run at the same time. With TAIL_SPLIT the tiles that fill whole
// waves of the resident blocks are units of their own, and the rest (the last, partial
// wave's: 32 tiles past 2 x 132) are cut into PARTS parts of K (rows_of: as many as the idle
// SMs take, 4 there), so the last wave is 128 quarter tiles, not 32 whole ones. Its units
// are ordered part by part: the blocks that run them at once are at the same K offset of
// neighbouring tiles, and read the same slices of A and B through L2 (stream-K's contiguous
// ranges, a block's crossing tiles, put them at different offsets: on the H100 that took up
// to 1.6 times the whole tiles' time). Each part leaves float partial sums in a workspace
// slot, which tail_reduce adds up, applying the epilogue. A consumer warp stores its 16 rows
// through its own shared-memory buffer, 64 columns at a time, from which the TMA unit writes
// them to C (where C's layout allows).
//
// With CLUSTER > 1 the blocks run as a thread-block cluster on CLUSTER_M x CLUSTER_N
// neighbouring tiles (CLUSTER_M consecutive rows of CLUSTER_N consecutive columns; rank r is
// row r % CLUSTER_M, column r / CLUSTER_M). The blocks of a column share B, those of a row
// share A: each block loads 1 / CLUSTER_M of its B and 1 / CLUSTER_N of its A and multicasts
// each share to the blocks that share it, so L2 sends each slice once per cluster row or
// column (a ragged M of three 128-row tiles reads B once, not three times). A stage is then
// refilled only when the consumers of every block have released it (the empty barriers count
// all blocks' arrivals).
// A block's producer, done loading, waits until its stages' last hand-backs have arrived: then
// no peer will multicast into this block or arrive on its barriers, and the block may leave.
// (A cluster barrier at the end did the same, and cost 25 % at 961x1536x5376 in pairs of
// 128x128 tiles on the H200: the idle threads of the producer's warpgroup waited on it
// through the whole kernel, beside the one that loads.)
//
// With PINGPONG the two consumer warpgroups do not share a tile: each runs every other unit
// of its block, all BM rows of it, their main loops taking turns (turn_wait): while one
// warpgroup's epilogue rounds and stores its tile, the other's wgmmas keep the tensor cores
// busy (CUTLASS's ping-pong kernel; cuBLAS's nvjet kernels without `coop` in their names).
//
// With swap_ab the renderer gives this kernel the problem C^T = B^T A^T (gemm_cuda.cpp's
// swapped_ab): M along wgmma's N in 8-row steps, C^T stored through each warp's buffer
// (STAGED_T), the epilogue called with (n, m) as its (m, n).
//
// Rendered by gemm_cuda.cpp after the prelude, <cuda.h>, <type_traits>, the problem's
// constants, T, TC, kf_epilogue, kf_epilogue2 and the mma_sync kernel (mma_sync.cuh, section `kernel`),
// which runs views whose base pointers TMA cannot take.
//
// A kernel file (docs/TEMPLATES.md, "Kernel files"): the renderer takes the text of each
// `// @section NAME` ... `// @end NAME` block, keeps the first branch of its
// `#ifdef KFORGE_RENDERED` alternatives, and substitutes `$name$` (a value; a macro defined
// below in a compile on its own) and `/*$name$*/` (generated code, such as the epilogue's
// arguments; nothing in a compile on its own). Everything outside the sections is there only
// so that this file compiles on its own (tests/integration/kernel_files_test.cpp):
//   nvcc -std=c++17 --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -x cu -c wgmma.cuh -o wgmma.o
#include "../prelude/cuda.cuh"
#include <cuda.h>
#include <type_traits>

// What this kernel takes from the mma_sync kernel (mma_sync.cuh), which a rendering puts in
// front of it: its entry and the kernel that adds up split-K's partial sums.
namespace tc {
cudaError_t run(const half* A, const half* B, half* C, float* W, int64_t M, cudaStream_t stream);
constexpr bool W_COLUMNS = false;
__device__ __forceinline__ int64_t w_offset(int64_t M, int64_t m, int64_t n) { return m * 64 + n; }
__device__ __forceinline__ void store_quad(half* p, int64_t step, const float* v, int count) {}
inline int64_t reduce_quads(int64_t M) { return M * 16; }
template <int64_t S, bool DEPENDENT>
__global__ void splitk_reduce(const float* W, half* C, int64_t M) {}
}  // namespace tc

namespace {
#include "standalone.h"
using T = half;
using TC = half;
// The placeholders, for a compile on its own.
#define $bm$ 128
#define $bn$ 64
#define $stages$ 4
#define $consumers$ 2
#define $split_k$ 2
#define $tail_split$ 0
#define $cluster_m$ 2
#define $cluster_n$ 1
#define $pingpong$ false
#define $a_kmajor$ true
#define $b_kmajor$ false
#define $a_batched$ false
#define $b_batched$ false
#define $a_inner$ 256
#define $a_outer$ M
#define $a_batch$ 1
#define $a_outer_stride$ 256
#define $a_batch_stride$ (uint64_t(M) * 256 + 7) / 8 * 8
#define $b_inner$ 256
#define $b_outer$ 256
#define $b_batch$ 1
#define $b_outer_stride$ 256
#define $b_batch_stride$ 65536
#define $a_packed$ false
#define $b_packed$ false
#define $a_src_outer_stride$ 0
#define $a_src_batch_stride$ 0
#define $b_src_outer_stride$ 0
#define $b_src_batch_stride$ 0
// The signature KernelSignature writes, for tensors A, B and C.
#define $DECL$ PT_EXPORT int KERNEL_NAME(const half* in_ptr0, const half* in_ptr1, half* out_ptr0, \
    int64_t M, int64_t N, int64_t K, int64_t batch, size_t* workspace_size, uint8_t* workspace, cudaStream_t stream)
#define $A$ in_ptr0
#define $B$ in_ptr1
#define $C$ out_ptr0
#define $run_m$ M

// @section wgmma

namespace wg {
constexpr int BM = $bm$, BN = $bn$, BK = 64, STAGES = $stages$, CONSUMERS = $consumers$, SPLIT_K = $split_k$;
constexpr int CLUSTER_M = $cluster_m$, CLUSTER_N = $cluster_n$, CLUSTER = CLUSTER_M * CLUSTER_N;
constexpr int TAIL_SPLIT = $tail_split$;  // 0: every tile whole; 1: the last partial wave's tiles cut into parts of K
// The tail split's workspace slots (one BM x BN float tile each: a part of a tile), and the
// most parts a tile is cut into.
constexpr int64_t MAX_SLOTS = 320, MAX_PARTS = 8;
static_assert(TAIL_SPLIT == 0 || (SPLIT_K == 1 && CLUSTER == 1), "tail_split takes split_k 1 and cluster_m and cluster_n 1");
constexpr int THREADS = (CONSUMERS + 1) * 128;
// With PINGPONG the two consumer warpgroups take turns: each runs every other unit of the block
// whole (BM rows), and one's epilogue overlaps the other's main loop (consume()). Otherwise
// they split each tile's rows.
constexpr bool PINGPONG = $pingpong$;
static_assert(!PINGPONG || CONSUMERS == 2, "pingpong takes two consumer warpgroups");
constexpr int WG_M = PINGPONG ? BM : BM / CONSUMERS, M_ITERS = WG_M / 64;
constexpr int RELEASERS = PINGPONG ? 1 : CONSUMERS;  // the consumer warpgroups that hand back each stage, per block
constexpr bool A_KMAJOR = $a_kmajor$, B_KMAJOR = $b_kmajor$;
constexpr bool A_BATCHED = $a_batched$, B_BATCHED = $b_batched$;
constexpr int KTILES = int((kK + BK - 1) / BK);
constexpr int KPS = (KTILES + SPLIT_K - 1) / SPLIT_K, SPLITS = (KTILES + KPS - 1) / KPS;  // K slices per split; splits with work
constexpr int64_t TILES_N = (kN + BN - 1) / BN, GROUPS_N = (TILES_N + CLUSTER_N - 1) / CLUSTER_N;  // columns of tiles, of clusters
// tile_at's order: GROUP_M rows of tiles (of clusters) at a time, column by column, so that
// consecutive units share B's tiles. With 4 columns of tiles or fewer, B's few tiles stay in L2
// whatever the order, and the order in which consecutive units share A's tiles instead (row by
// row, GROUP_M 1) ran faster on the H200 (bench/gemm_ab.py, fp16): swapped 256x88 at
// 257x20480x5120 0.0954 ms against 0.1048 (torch.mm 0.0916), swapped 128x136 split 2 at
// 257x4096x4096 0.0236 against 0.0254, 128x256 at 8192x1024x8192 0.1849 against 0.1858. Not
// with clusters (256x88 in pairs at 257x20480x5120: 0.1055 row by row, 0.1027 in groups), nor
// with many columns (128x192 at 459x4144x16424, 22 of them: 0.182 against 0.127).
constexpr int64_t GROUP_M = CLUSTER == 1 && GROUPS_N <= 4 ? 1 : 8;
// What M (an argument) makes of the work. A cluster's tiles are rows CLUSTER_M t ..
// CLUSTER_M t + CLUSTER_M - 1 of columns CLUSTER_N u .. (the last groups may reach past M or
// N: TMA reads zeros there and nothing is stored); `units` counts a cluster's units of work,
// `groups_m` its groups of tile rows.
// With TAIL_SPLIT: units [0, dp) are whole tiles, and unit dp + s tail + t part s of the
// PARTS of K of tile dp + t (none: dp = units, parts = 1). `streamed`: the operand whose TMA
// loads ask L2 to evict their lines first (1: A, 2: B; 0: neither), see rows_of().
struct Rows {
  int64_t M, groups_m, units, dp, tail, parts;
  int streamed;
};
// The parts of K that the `tail` tiles past the last full wave are cut into: the count of 2
// to MAX_PARTS (no more than the K slices, nor the slots hold) whose parts finish soonest in
// waves of `resident` blocks (ceil(tail parts / resident) waves of 1 / parts of a tile), the
// smallest of equals; 1 where none finishes before the whole tiles' one wave. The search's
// cost model counts the same (gemm_cuda.cpp's cuda_tail_parts, with these two limits).
__host__ __device__ __forceinline__ int64_t tail_parts(int64_t tail, int64_t resident, int64_t ktiles) {
  int64_t best = 1;
  for (int64_t p = 2; p <= MAX_PARTS && p <= ktiles && tail * p <= MAX_SLOTS; ++p)
    if ((tail * p + resident - 1) / resident * best < (tail * best + resident - 1) / resident * p) best = p;
  return best;
}
// `resident`: the blocks (clusters) that run at once; `sms`: the GPU's SMs.
//
// A problem too small to be compute-bound (fewer 128x256 tiles than SMs, the test of
// gemm_cuda.cpp's search) streams its larger operand from memory: read once or twice, on to the
// next K slices, while the smaller one (and split-K's partial sums) are read again from L2.
// Its loads ask L2 to evict their lines first. On the H100 that took 65x5120x5120 (B^T
// streaming, swapped 64x72 tiles) from 0.0302 to 0.0280 ms, 181x16512x6184 (B, 128x256 in
// clusters of two) from 0.0930 to 0.0897, 65x1536x6144 (B, 64x128, K split 5) from 0.0186 to
// 0.0180; evict_last on the smaller operand added nothing. Decided here, at M, so that a
// kernel that takes M at run time is the same source for every M.
__host__ __device__ __forceinline__ Rows rows_of(int64_t M, int64_t resident, int64_t sms) {
  const int64_t groups_m = ((M + BM - 1) / BM + CLUSTER_M - 1) / CLUSTER_M;
  const int64_t tiles = groups_m * GROUPS_N * kBatch * SPLITS;
  const bool compute_bound = kBatch * ((M + 127) / 128) * ((kN + 255) / 256) >= sms;
  const int64_t a_rows = M * (A_BATCHED ? kBatch : 1), b_rows = kN * (B_BATCHED ? kBatch : 1);
  Rows r{M, groups_m, tiles, tiles, 0, 1, compute_bound ? 0 : a_rows >= b_rows ? 1 : 2};
  if constexpr (TAIL_SPLIT > 0) {
    const int64_t tail = tiles % resident, parts = tail_parts(tail, resident, KTILES);
    if (parts > 1) {
      r.dp = tiles - tail;  // a multiple of resident: every block runs as many whole tiles
      r.tail = tail, r.parts = parts;
      r.units = r.dp + tail * parts;
    }
  }
  return r;
}
// An operand whose own strides or offset TMA cannot take is copied into the workspace first
// (gemm_cuda.cpp's TmaOperand::packed), rows padded to 64 elements (128 bytes); the maps read the copy.
constexpr bool A_PACKED = $a_packed$, B_PACKED = $b_packed$;
constexpr size_t align256(size_t x) { return (x + 255) / 256 * 256; }
// split-K's partial sums: SPLITS float slices of [batch][M][N]; the tail split's: a tile per slot.
size_t partial_bytes(int64_t M) {
  if constexpr (TAIL_SPLIT > 0) return size_t(MAX_SLOTS) * BM * BN * 4;
  return SPLITS > 1 && M > 0 ? size_t(SPLITS) * size_t(kBatch * M * kN) * 4 : 0;
}
size_t packed_a_bytes(int64_t M) { return A_PACKED ? align256(size_t($a_batch$) * size_t($a_batch_stride$) * 2) : 0; }
size_t packed_b_bytes() { return B_PACKED ? align256(size_t($b_batch$) * size_t($b_batch_stride$) * 2) : 0; }
// The workspace: the partial sums, then the packed copies of A and B, each 256-byte aligned.
size_t workspace_bytes(int64_t M) {
  if constexpr (!A_PACKED && !B_PACKED) return partial_bytes(M);
  return align256(partial_bytes(M)) + packed_a_bytes(M) + packed_b_bytes();
}
// Two outputs of a row at once where they are adjacent and the pair stays 2-element aligned
// (the base pointer is checked at run time).
constexpr bool PAIRS = sCn == 1 && sCm % 2 == 0 && sCb % 2 == 0 && offC % 2 == 0;
// Rows stored by TMA from shared memory: 16-bit outputs, rows contiguous and 8-element (16-byte)
// aligned, as a tensor map needs; otherwise pairs or single outputs from registers. The
// kernel has one store path or the other, never both: with both (the choice made at run time
// by C's alignment) its code was 2.4 times as large (163 KiB, most of it the unrolled
// epilogue), it was slower, and its time moved by up to 12% with where the driver loaded that
// code (docs/BENCHMARKS.md). A C whose base breaks the alignment runs the mma_sync kernel.
constexpr bool STAGED = sizeof(TC) == 2 && sCn == 1 && sCm % 8 == 0 && sCb % 8 == 0 && offC % 8 == 0;
constexpr uint32_t EPI_WARP_BYTES = 16 * 64 * 2;  // a warp's 16 rows x 64 columns of 16-bit outputs
// C with this kernel's rows contiguous (swap_ab's C^T, where a row of C is a column here, or a
// column-major C), 16-bit and 8-element aligned otherwise: a warp's 16 rows are 32 contiguous
// bytes of each of its columns, which it transposes through its shared-memory buffer (stmatrix
// .trans) and stores 16 bytes a thread (whole 32-byte sectors where C's columns start on 32
// bytes) instead of one 2-byte store a thread for each output. On the
// H100, 1204x8192x2048 swapped in 256x152 tiles: 0.0612 ms, 0.0690 storing from registers
// (cuBLAS 0.0588); 3163x1024x1024 in 128x200: 0.0156 ms against 0.0185.
constexpr bool STAGED_T = !STAGED && sizeof(TC) == 2 && sCm == 1 && sCn % 8 == 0 && sCb % 8 == 0 && offC % 8 == 0;
// Tiles are stored in 128-byte-swizzled atoms of 8 rows x 128 bytes, as TMA's SWIZZLE_128B
// writes them and wgmma's descriptors read them: a K-major tile as [rows][64], an M- or
// N-major tile as [rows / 64 panels][64 (K)][64].
constexpr uint32_t ROW = 128, ATOM = 8 * ROW, PANEL = 64 * ROW;  // bytes
constexpr uint32_t A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
// A cluster's blocks each load a share of a K-major operand's rows (B's along a cluster column,
// A's along a row): SHARE_B (SHARE_A) rows, whole 8-row swizzle atoms, the last share ending at
// the tile's last row, so that where BN / CLUSTER_M is no multiple of 8 (88 rows in two) the
// shares overlap (rows 0-47 and 40-87) and the overlap arrives twice, with the same bytes.
__host__ __device__ constexpr int share_rows(int rows, int blocks) { return ((rows + blocks - 1) / blocks + 7) / 8 * 8; }
constexpr int SHARE_A = share_rows(BM, CLUSTER_N), SHARE_B = share_rows(BN, CLUSTER_M);
__device__ __forceinline__ int share_at(int rows, int share, int r) { return r * share < rows - share ? r * share : rows - share; }
// The bytes a stage's full barrier sees arrive: the tiles, plus the shares' overlaps.
constexpr uint32_t ARRIVING_BYTES = (A_KMAJOR && CLUSTER_N > 1 ? CLUSTER_N * SHARE_A * BK * 2 : A_BYTES) +
                                    (B_KMAJOR && CLUSTER_M > 1 ? CLUSTER_M * SHARE_B * BK * 2 : B_BYTES);
constexpr uint32_t BARRIER_BYTES = (16 * STAGES + 127) / 128 * 128;  // 2 mbarriers a stage
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024 + BARRIER_BYTES + CONSUMERS * 4 * EPI_WARP_BYTES;  // + alignment slack

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
// Programmatic dependent launch: the kernel that adds up the partial sums is launched while
// the gemm runs (launch_dependents, issued by the gemm's blocks as they start) and waits for
// the gemm's completion and its memory (wait_for_gemm), instead of starting only after the
// gemm has ended: the launch latency overlaps the gemm.
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void wait_for_gemm() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives on the barrier at the same offset in block `cta` of the cluster (this one included).
// With the default cta-scope semantics: a consumer hands back a stage whose wgmmas have
// completed, so there is nothing to publish, and `.release.cluster` would put a cluster-wide
// memory barrier before every hand-back (it made the kernel 2x slower: docs/BENCHMARKS.md).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar), "r"(cta) : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of the cluster that has not exited arrives, then waits for the others.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "KF_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra KF_WAIT;\n"
      "}\n" ::"r"(bar), "r"(parity) : "memory");
}
// An L2 policy that evicts the lines a load brings in before any other (createpolicy), for
// the operand Rows::streamed names.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
// A TMA load of a box at (c0, c1, c2), with the L2 policy `policy` where it is not 0.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2, uint64_t policy = 0) {
  if (policy) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, %4, %5}], [%2], %6;\n"
                 ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "l"(policy) : "memory");
    return;
  }
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
               ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
// The same copy, landing at the same offset in every block of `mask` and completing bytes on
// each one's barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, uint16_t mask, int c0, int c1, int c2,
                                                   uint64_t policy = 0) {
  if (policy) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint [%0], [%1, {%4, %5, %6}], [%2], %3, %7;\n"
                 ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "h"(mask), "r"(c0), "r"(c1), "r"(c2), "l"(policy) : "memory");
    return;
  }
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%4, %5, %6}], [%2], %3;\n"
               ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "h"(mask), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
// A warp's staged block of outputs (16 rows x 64 columns, 128-byte swizzled) to C at (column
// c0, row c1, batch c2): the TMA unit writes what lies inside C and nothing past its edges,
// while the warp goes on; one bulk group per block.
__device__ __forceinline__ void tma_store(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
               "cp.async.bulk.commit_group;\n" ::"l"(reinterpret_cast<uint64_t>(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
// The thread's bulk stores have read their shared memory (`.read`), or are done.
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void tma_store_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// This thread's shared-memory writes become visible to the TMA unit (the async proxy).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// A shared-memory matrix descriptor: start, leading and stride byte offsets, 128-byte swizzle.
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | uint64_t(lbo >> 4) << 16 | uint64_t(sbo >> 4) << 32 | uint64_t(1) << 62;
}
// Rows [r0, r0 + 64) of a stage's A tile and K slice [16 kk, 16 kk + 16): K-major, the slice
// is 32 bytes into each swizzled row; M-major, 16 rows of K into the row's 64-wide panel.
__device__ __forceinline__ uint64_t desc_a(uint32_t a, int r0, int kk) {
  return A_KMAJOR ? desc(a + r0 * ROW + kk * 32, 16, ATOM) : desc(a + (r0 / 64) * PANEL + kk * 16 * ROW, PANEL, ATOM);
}
__device__ __forceinline__ uint64_t desc_b(uint32_t b, int kk) {
  return B_KMAJOR ? desc(b + kk * 32, 16, ATOM) : desc(b + kk * 16 * ROW, PANEL, ATOM);
}
// A descriptor `bytes` further on: the start address field holds the address / 16 in its low
// 14 bits, and every stage lies below 256 KiB, so the sum never carries out of it.
//
// The main loop's instructions between two slices' wgmmas delay every slice whose data has just
// arrived. So it adds a stage's and a slice's offsets (constants, but for the stage's) to stage
// 0's descriptors instead of building each from its address, and steps a Ring instead of
// dividing a 64-bit count by STAGES. In the SASS of 961x1536x5376's swapped 128x88 (7 stages)
// those were most of the loop's 175 instructions per two slices (8 of them wgmmas), and the loop
// without them took the kernel from 0.0326 to 0.0283 ms on the H200 (cuBLAS: 0.0281).
__device__ __forceinline__ uint64_t desc_plus(uint64_t d, uint32_t bytes) { return d + (bytes >> 4); }
// A position in the ring of stages: the stage and the parity of its phase.
struct Ring {
  int s = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void next() {
    if (++s == STAGES) s = 0, phase ^= 1;
  }
};
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Keeps the compiler from moving accumulator accesses across an asynchronous wgmma.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#ifdef KFORGE_RENDERED
$wgmma_fn$
#else  // KFORGE_RENDERED
// m64n64k16 (BN 64), K-major A, N-major B: what wgmma_function() in gemm_cuda.cpp writes for them.
__device__ __forceinline__ void wgmma(float (&d)[BN / 2], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(1));
}
#endif  // KFORGE_RENDERED
// Output tiles in a grouped order (GROUP_M tile rows at a time, column by column), so the
// blocks resident together share A and B panels in L2 (GROUP_M 1: row by row).
struct Tile {
  int b, m0, n0;
};
// `rank`: the block's place in its cluster (row rank % CLUSTER_M, column rank / CLUSTER_M of
// the cluster's tiles); t counts clusters' places.
__device__ __forceinline__ Tile tile_at(int64_t t, int rank, int64_t groups_m) {
  constexpr int64_t GROUP = GROUP_M * GROUPS_N;
  const int64_t per_batch = groups_m * GROUPS_N;  // one batch: no 64-bit division by it
  const int b = kBatch == 1 ? 0 : int(t / per_batch);
  const int64_t r = kBatch == 1 ? t : t % per_batch, first = r / GROUP * GROUP_M;
  const int64_t rows = groups_m - first < GROUP_M ? groups_m - first : GROUP_M;
  const int64_t tm = first + (r % GROUP) % rows, tn = (r % GROUP) / rows;
  return {b, int((tm * CLUSTER_M + rank % CLUSTER_M) * BM), int((tn * CLUSTER_N + rank / CLUSTER_M) * BN)};
}

// A unit of work: its tile, and its part of the tile's K range, slices [k0, k1) of split
// `split`; `slot` >= 0: a part of a tail tile, whose partial sums go to workspace slot `slot`.
struct Work {
  int64_t unit, tile;
  int split, k0, k1;
  int64_t slot;
};
// Unit `unit` (past the last: a unit that says so).
__device__ __forceinline__ Work unit_work(int64_t unit, const Rows& r) {
  if (unit >= r.units) return {unit, 0, 0, 0, 0, -1};
  if constexpr (TAIL_SPLIT > 0) {
    if (unit < r.dp) return {unit, unit, 0, 0, KTILES, -1};
    const int64_t u = unit - r.dp, part = u / r.tail;
    return {unit, r.dp + u % r.tail, 0, int(part * KTILES / r.parts), int((part + 1) * KTILES / r.parts), u};
  } else {
    const int split = int(unit % SPLITS), k0 = split * KPS;
    return {unit, unit / SPLITS, split, k0, k0 + KPS < KTILES ? k0 + KPS : KTILES, -1};
  }
}

// Two adjacent outputs, rounded as kf_store rounds each.
__device__ __forceinline__ void store_pair(TC* p, float x, float y) {
  if constexpr (std::is_same<TC, half>::value) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
  } else if constexpr (std::is_same<TC, __nv_bfloat16>::value) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
  } else {
    kf_store(p, x);
    kf_store(p + 1, y);
  }
}

// Two outputs rounded to TC, as one 32-bit word (the first in the low half).
__device__ __forceinline__ uint32_t packed_pair(float x, float y) {
  alignas(4) TC pair[2];
  store_pair(pair, x, y);
  return *reinterpret_cast<const uint32_t*>(pair);
}

// The epilogue of two outputs of a row, (m, n) and (m, n + 1), at their coordinates clamped
// into C: computed whether or not they are in C (one outside is never stored), so no branch
// separates the epilogue's loads and they can be issued early and shared between rows (a bias
// is loaded once per column). Where kN is a multiple of BN and the columns of tiles fill whole
// clusters, every tile lies inside C's columns (with CLUSTER_N > 1 the last cluster's tiles may
// start past kN: tile_at): no clamp there, and a bias's loads are then the tile's address plus
// constants. The pair shares one rcp between two tanh gelus (kf_gelu_tanh2, gemm/gelu.cuh): on
// the H200 the epilogue of 2048x11008x4096 with bias + gelu took 6 % of the kernel's time,
// bound by the SFU.
__device__ __forceinline__ void out_pair(float& v0, float& v1, int b, int64_t m, int64_t n, int64_t M/*$EPPARAMS$*/) {
  constexpr bool inside = kN == GROUPS_N * CLUSTER_N * BN;
  const int64_t mc = m < M ? m : M - 1;
  kf_epilogue2(v0, v1, b, mc, inside || n < kN ? n : kN - 1, mc, inside || n + 1 < kN ? n + 1 : kN - 1/*$EPARGS$*/);
}

// A consumer warp's accumulators of one 64-row wgmma tile: warp w holds rows 16w + lane/4
// (+8), columns 8j + 2 (lane % 4) (+1). `row0` is the warp's first row, `n0` the tile's.
// 64 columns at a time: the warp rounds its 16 x 64 outputs into registers, waits until its
// buffer's previous block has been read out, writes them there (16 rows x 128 bytes, each
// 16-byte unit j of row r at unit j ^ (r % 8): TMA's 128-byte swizzle, in which neither the
// pair writes nor the unit's reads conflict) and has the TMA unit store the block, clipped to C.
__device__ __forceinline__ void store_staged(const float* acc, unsigned char* buf, const CUtensorMap* tmC, int b, int64_t row0,
                                             int64_t n0, int64_t M, int lane/*$EPPARAMS$*/) {
#pragma unroll
  for (int c = 0; c < BN / 64; ++c) {
    uint32_t packed[16];
#pragma unroll
    for (int u = 0; u < 8; ++u)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = lane / 4 + 8 * h, j = c * 8 + u;
        const int64_t m = row0 + r, n = n0 + j * 8 + 2 * (lane % 4);
        float v0 = acc[j * 4 + 2 * h], v1 = acc[j * 4 + 2 * h + 1];
        out_pair(v0, v1, b, m, n, M/*$EPARGS$*/);
        packed[2 * u + h] = packed_pair(v0, v1);
      }
    if (lane == 0) tma_store_wait_read();
    __syncwarp();
#pragma unroll
    for (int u = 0; u < 8; ++u)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = lane / 4 + 8 * h;
        *reinterpret_cast<uint32_t*>(buf + r * 128 + ((u ^ (r % 8)) * 16) + (lane % 4) * 4) = packed[2 * u + h];
      }
    fence_async_shared();
    __syncwarp();
    if (lane == 0) tma_store(tmC, smem_u32(buf), int(n0 + c * 64), int(row0), b);
  }
}

// Transposing stores of 8x8 16-bit matrices (x4: four, x2: two) from the mma fragment layout
// (a thread's register holds two adjacent columns of row lane / 4): the address lane 8k + i
// gives receives column i of matrix k, its 8 rows in a row.
__device__ __forceinline__ void stmatrix_t4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
__device__ __forceinline__ void stmatrix_t2(uint32_t addr, uint32_t r0, uint32_t r1) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(addr), "r"(r0), "r"(r1) : "memory");
}

// STAGED_T's store of a consumer warp's accumulators of one 64-row wgmma tile (rows row0 ..
// row0 + 15, columns n0 .. n0 + BN - 1), up to 64 columns at a time: the 8x8 matrices of
// rows 8h .. 8h + 7 and columns 8j .. 8j + 7 go transposed into the buffer as [column][16
// rows] (32 bytes a column, its 16-byte halves swapped in columns 4-7 of every 8, so that no
// matrix's 8 columns share a bank), and each thread then stores half a column: 16 bytes at
// (row0 + 8 (lane % 2), column lane / 2 + 16 q). Rows past M (the last vector of an M that
// is no multiple of 8) and a C whose base is not 16-byte aligned are stored one output at a time.
__device__ __forceinline__ void store_staged_t(const float* acc, unsigned char* buf, TC* Cb, bool vec, int b, int64_t row0, int64_t n0,
                                               int64_t M, int lane/*$EPPARAMS$*/) {
  const uint32_t base = smem_u32(buf);
  auto slot = [](int col, int half) { return uint32_t(col * 32 + ((half ^ ((col >> 2) & 1)) * 16)); };
  auto word = [&](int j, int h) {
    const int64_t m = row0 + lane / 4 + 8 * h, n = n0 + j * 8 + 2 * (lane % 4);
    float v0 = acc[j * 4 + 2 * h], v1 = acc[j * 4 + 2 * h + 1];
    out_pair(v0, v1, b, m, n, M/*$EPARGS$*/);
    return packed_pair(v0, v1);
  };
#pragma unroll
  for (int c = 0; c < (BN + 63) / 64; ++c) {
    constexpr int J = BN / 8;
    const int j0 = c * 8, j1 = j0 + 8 < J ? j0 + 8 : J;
    __syncwarp();  // the previous block's reads are done
#pragma unroll
    for (int j = j0; j + 1 < j1; j += 2) {
      const int k = lane / 8;
      stmatrix_t4(base + slot((j + k / 2 - j0) * 8 + lane % 8, k % 2), word(j, 0), word(j, 1), word(j + 1, 0), word(j + 1, 1));
    }
    if ((j1 - j0) % 2 != 0) stmatrix_t2(base + slot((j1 - 1 - j0) * 8 + lane % 8, (lane / 8) % 2), word(j1 - 1, 0), word(j1 - 1, 1));
    __syncwarp();
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int col = q * 16 + lane / 2, half = lane % 2;
      const int64_t m = row0 + 8 * half, n = n0 + j0 * 8 + col;
      if (col >= (j1 - j0) * 8 || n >= kN || m >= M) continue;
      const unsigned char* const src = buf + slot(col, half);
      TC* const p = Cb + m + n * sCn;
      if (vec && m + 8 <= M) {
        *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(src);
      } else {
        for (int i = 0; i < 8 && m + i < M; ++i) p[i] = reinterpret_cast<const TC*>(src)[i];
      }
    }
  }
}

// A split's partial sums, as floats, to its [batch] slice of the workspace, laid out as
// tc::splitk_reduce adds them up: C's rows ([M][N], two adjacent outputs of a row at once) or
// its columns (W_COLUMNS: [N][M], where a warp's store fills a column's 32-byte sectors with
// the 8 rows of its lanes).
__device__ __forceinline__ void store_partial(const float* acc, float* W, int64_t row0, int64_t n0, int64_t M, int lane) {
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = row0 + lane / 4 + 8 * h, n = n0 + j * 8 + 2 * (lane % 4);
      if (m >= M) continue;
      const float v0 = acc[j * 4 + 2 * h], v1 = acc[j * 4 + 2 * h + 1];
      if (!tc::W_COLUMNS && kN % 2 == 0 && n + 1 < kN) {
        *reinterpret_cast<float2*>(W + tc::w_offset(M, m, n)) = make_float2(v0, v1);
      } else {
        if (n < kN) W[tc::w_offset(M, m, n)] = v0;
        if (n + 1 < kN) W[tc::w_offset(M, m, n + 1)] = v1;
      }
    }
}

// A tail part's partial sums, as floats, to its BM x BN slot: [BM][BN], or [BN][BM] with W_COLUMNS.
__device__ __forceinline__ int slot_offset(int r, int c) { return tc::W_COLUMNS ? c * BM + r : r * BN + c; }
__device__ __forceinline__ void store_tile_partial(const float* acc, float* Wt, int row0, int lane) {
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + lane / 4 + 8 * h, c = j * 8 + 2 * (lane % 4);
      const float v0 = acc[j * 4 + 2 * h], v1 = acc[j * 4 + 2 * h + 1];
      if constexpr (tc::W_COLUMNS) {
        Wt[slot_offset(r, c)] = v0;
        Wt[slot_offset(r, c + 1)] = v1;
      } else {
        *reinterpret_cast<float2*>(Wt + slot_offset(r, c)) = make_float2(v0, v1);
      }
    }
}

// A tail tile's C = epilogue(the sum of its parts), four adjacent outputs of a row (of a column,
// with W_COLUMNS) a thread, every tile's threads side by side (TILE_QUADS a tile). The parts'
// loads are independent and issued at once, so the tiles are added up by the whole GPU, not
// one block each.
constexpr int TILE_QUADS = BM * BN / 4;
__global__ void __launch_bounds__(256) tail_reduce(const float* __restrict__ W, TC* __restrict__ C, const Rows rows/*$EPPARAMS$*/) {
  wait_for_gemm();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, t = i / TILE_QUADS;
  const int q = int(i % TILE_QUADS);
  constexpr int LENGTH = tc::W_COLUMNS ? BM : BN;  // a line of the slot: a row, or with W_COLUMNS a column
  const int line = q / (LENGTH / 4), at = (q % (LENGTH / 4)) * 4;
  const int r = tc::W_COLUMNS ? at : line, c = tc::W_COLUMNS ? line : at;
  if (t >= rows.tail) return;
  const Tile tile = tile_at(rows.dp + t, 0, rows.groups_m);
  const int64_t m = tile.m0 + r, n = tile.n0 + c;
  if (m >= rows.M || n >= kN) return;
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t part = 0; part < rows.parts; ++part) {
    const float4 x = *reinterpret_cast<const float4*>(W + (part * rows.tail + t) * BM * BN + slot_offset(r, c));
    v[0] += x.x, v[1] += x.y, v[2] += x.z, v[3] += x.w;
  }
  const int64_t room = tc::W_COLUMNS ? rows.M - m : kN - n;
  const int count = int(room < 4 ? room : 4);
  for (int e = 0; e < count; ++e)
    v[e] = kf_epilogue(v[e], tile.b, tc::W_COLUMNS ? m + e : m, tc::W_COLUMNS ? n : n + e/*$EPARGS$*/);
  tc::store_quad(C + offC + int64_t(tile.b) * sCb + m * sCm + n * sCn, tc::W_COLUMNS ? sCm : sCn, v, count);
}

// A packed operand's copy: 8 elements (16 bytes) of a row a thread, read one by one from the
// operand's own strides (any alignment), written whole into rows of d_outer elements; the
// padding past `inner` is zero (the maps end at `inner`, so nothing reads it).
__global__ void __launch_bounds__(256) pack(const T* __restrict__ src, T* __restrict__ dst, int64_t inner, int64_t outer, int64_t batch,
                                            int64_t s_outer, int64_t s_batch, int64_t d_outer, int64_t d_batch) {
  const int64_t chunks = (inner + 7) / 8, total = batch * outer * chunks;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % chunks, r = i / chunks, o = r % outer, b = r / outer;
    const T* const s = src + b * s_batch + o * s_outer + c * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    T* const e = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (c * 8 + j < inner) e[j] = s[j];
    *reinterpret_cast<uint4*>(dst + b * d_batch + o * d_outer + c * 8) = v;
  }
}
cudaError_t pack_into(const T* src, T* dst, int64_t inner, int64_t outer, int64_t batch, int64_t s_outer, int64_t s_batch,
                      int64_t d_outer, int64_t d_batch, int sms, cudaStream_t stream) {
  const int64_t threads = batch * outer * ((inner + 7) / 8);
  const unsigned blocks = unsigned(threads / 256 + 1 < 8 * int64_t(sms) ? threads / 256 + 1 : 8 * int64_t(sms));
  pack<<<blocks, 256, 0, stream>>>(src, dst, inner, outer, batch, s_outer, s_batch, d_outer, d_batch);
  return cudaGetLastError();
}

// The blocks of a cluster's first row and column of tiles, as multicast masks (bit r: rank
// r); row rm's blocks are FIRST_ROW << rm, column rn's FIRST_COLUMN << (rn * CLUSTER_M).
constexpr uint32_t first_row() {
  uint32_t m = 0;
  for (int c = 0; c < CLUSTER_N; ++c) m |= 1u << (CLUSTER_M * c);
  return m;
}
constexpr uint32_t FIRST_ROW = first_row(), FIRST_COLUMN = (1u << CLUSTER_M) - 1;

// Hands a stage back: to this block's producer, and with a cluster to every peer's as well
// (their multicasts also write into this block's stage).
__device__ __forceinline__ void release(uint32_t bar) {
  if constexpr (CLUSTER > 1) {
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) mbar_arrive_cluster(bar, uint32_t(c));
  } else {
    mbar_arrive(bar);
  }
}

// The producer thread: the TMA loads of every unit's K slices, STAGES ahead of the consumers.
// Returns the slices it loaded.
__device__ __forceinline__ int64_t produce(const CUtensorMap& tmA, const CUtensorMap& tmB, uint32_t base, uint32_t full, uint32_t empty, int rank,
                                        const Rows rows, int64_t first_unit, int64_t unit_step) {
  int64_t it = 0;
  Ring ring;
  const uint64_t pa = rows.streamed == 1 ? evict_first_policy() : 0, pb = rows.streamed == 2 ? evict_first_policy() : 0;
  const int rm = rank % CLUSTER_M, rn = rank / CLUSTER_M;  // this block's row and column in the cluster
  for (Work w = unit_work(first_unit, rows); w.unit < rows.units; w = unit_work(w.unit + unit_step, rows)) {
    const Tile tile = tile_at(w.tile, rank, rows.groups_m);
    const int ba = A_BATCHED ? tile.b : 0, bb = B_BATCHED ? tile.b : 0;
    for (int kt = w.k0; kt < w.k1; ++kt, ++it, ring.next()) {
      const int s = ring.s;
      if (it >= STAGES) mbar_wait(empty + 8 * s, ring.phase ^ 1);  // the consumers' release of its last round
      const uint32_t as = base + s * STAGE_BYTES, bs = as + A_BYTES, bar = full + 8 * s;
      mbar_expect_tx(bar, ARRIVING_BYTES);
      const int k0 = kt * BK;
      if constexpr (CLUSTER_N > 1) {  // this block's share of A, to the blocks of its row
        if (A_KMAJOR) {
          const int r0 = share_at(BM, SHARE_A, rn);
          tma_load_multicast(as + r0 * ROW, &tmA, bar, uint16_t(FIRST_ROW << rm), k0, tile.m0 + r0, ba, pa);
        } else {
#pragma unroll
          for (int j = rn; j < BM / 64; j += CLUSTER_N) tma_load_multicast(as + j * PANEL, &tmA, bar, uint16_t(FIRST_ROW << rm), tile.m0 + 64 * j, k0, ba, pa);
        }
      } else if (A_KMAJOR) {
        tma_load(as, &tmA, bar, k0, tile.m0, ba, pa);
      } else {
#pragma unroll
        for (int j = 0; j < BM / 64; ++j) tma_load(as + j * PANEL, &tmA, bar, tile.m0 + 64 * j, k0, ba, pa);
      }
      if constexpr (CLUSTER_M > 1) {  // this block's share of B, to the blocks of its column
        if (B_KMAJOR) {
          const int r0 = share_at(BN, SHARE_B, rm);
          tma_load_multicast(bs + r0 * ROW, &tmB, bar, uint16_t(FIRST_COLUMN << (rn * CLUSTER_M)), k0, tile.n0 + r0, bb, pb);
        } else {
#pragma unroll
          for (int j = rm; j < BN / 64; j += CLUSTER_M) tma_load_multicast(bs + j * PANEL, &tmB, bar, uint16_t(FIRST_COLUMN << (rn * CLUSTER_M)), tile.n0 + 64 * j, k0, bb, pb);
        }
      } else if (B_KMAJOR) {
        tma_load(bs, &tmB, bar, k0, tile.n0, bb, pb);
      } else {
#pragma unroll
        for (int j = 0; j < BN / 64; ++j) tma_load(bs + j * PANEL, &tmB, bar, tile.n0 + 64 * j, k0, bb, pb);
      }
    }
  }
  return it;
}

// PINGPONG's turns, on named barriers 1 and 2 (0 is __syncthreads'), 128 threads of each
// consumer warpgroup: the warpgroup of the block's unit u (u % 2) starts its main loop once the
// other has issued its wgmmas of unit u - 1 (turn_pass on barrier 1 + u % 2). So the main loops
// run one after the other in the order the producer loads their slices, and a warpgroup never
// waits on a stage's full barrier more than one phase ahead (its parity could not tell them
// apart), while the other warpgroup's epilogue overlaps it.
__device__ __forceinline__ void turn_wait(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void turn_pass(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

// The consumer warpgroups: wgmma over each unit's slices, then the unit's epilogue; both on
// every unit (rows wg * WG_M on), or with PINGPONG each on every other unit, whole.
__device__ __forceinline__ void consume(const CUtensorMap* tmC, TC* __restrict__ C, float* __restrict__ W, uint32_t base, uint32_t full, uint32_t empty,
                                        unsigned char* epi, int wg, int tid, int rank, const Rows rows, int64_t first_unit, int64_t unit_step/*$EPPARAMS$*/) {
  // Accumulator layout of wgmma.m64nN: warp w of the warpgroup holds rows 16w + lane/4 (+8),
  // columns 8j + 2 (lane % 4) (+1).
  const int warp = tid / 32, lane = tid % 32;
  unsigned char* const buf = epi + (wg * 4 + warp) * EPI_WARP_BYTES;
  float acc[M_ITERS][BN / 2];
  Ring ring;
  int last = 0;  // the stage of the slice before
  const int wg_row = PINGPONG ? 0 : wg * WG_M;  // this warpgroup's first row of a tile
  // Stage 0's descriptors of this warpgroup's rows of A, and of B.
  const uint64_t da = desc_a(base, wg_row, 0), db = desc_b(base + A_BYTES, 0);
  const int64_t M = rows.M;
  int64_t sliced = 0;  // PINGPONG: the slices of the block's units before this one (where its first lies in the ring)
  int u = 0;           // PINGPONG: the unit's place among the block's
  for (Work w = unit_work(first_unit, rows); w.unit < rows.units; w = unit_work(w.unit + unit_step, rows), ++u) {
    if constexpr (PINGPONG) {
      const int64_t before = sliced;
      sliced += w.k1 - w.k0;
      if (u % 2 != wg) continue;  // the other warpgroup's
      ring.s = int(before % STAGES), ring.phase = uint32_t(before / STAGES) & 1u;
    }
    const Tile tile = tile_at(w.tile, rank, rows.groups_m);
#pragma unroll
    for (int mi = 0; mi < M_ITERS; ++mi) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[mi][i] = 0.0f;
      fence_regs(acc[mi]);
    }
    if (PINGPONG && u > 0) turn_wait(1 + wg);
    for (int kt = w.k0; kt < w.k1; ++kt, ring.next()) {
      mbar_wait(full + 8 * ring.s, ring.phase);
      const uint32_t at = uint32_t(ring.s) * STAGE_BYTES;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
        for (int mi = 0; mi < M_ITERS; ++mi)
          wgmma(acc[mi], desc_plus(da, at + (A_KMAJOR ? mi * 64 * ROW + kk * 32 : mi * PANEL + kk * 16 * ROW)),
                desc_plus(db, at + (B_KMAJOR ? kk * 32 : kk * 16 * ROW)));
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous slice's wgmmas are done: hand its stage back
      if (kt > w.k0 && tid == 0) release(empty + 8 * last);
      last = ring.s;
    }
    if (PINGPONG && w.unit + unit_step < rows.units) turn_pass(2 - wg);  // unit u + 1's turn
    wgmma_wait<0>();
    if (tid == 0) release(empty + 8 * last);  // the tile's last slice
#pragma unroll
    for (int mi = 0; mi < M_ITERS; ++mi) fence_regs(acc[mi]);

    const int b = tile.b;
    if constexpr (TAIL_SPLIT > 0) {
      if (w.slot >= 0) {  // a part of a tail tile: its partial sums, for tail_reduce
        float* const Wt = W + w.slot * int64_t(BM) * BN;
#pragma unroll
        for (int mi = 0; mi < M_ITERS; ++mi) store_tile_partial(acc[mi], Wt, wg_row + mi * 64 + warp * 16, lane);
        continue;
      }
    }
    if constexpr (SPLITS > 1) {
      float* const Ws = W + (int64_t(w.split) * kBatch + b) * M * kN;
#pragma unroll
      for (int mi = 0; mi < M_ITERS; ++mi) store_partial(acc[mi], Ws, tile.m0 + wg_row + mi * 64 + warp * 16, tile.n0, M, lane);
      continue;
    }
    if constexpr (STAGED) {
#pragma unroll
      for (int mi = 0; mi < M_ITERS; ++mi) store_staged(acc[mi], buf, tmC, b, tile.m0 + wg_row + mi * 64 + warp * 16, tile.n0, M, lane/*$EPARGS$*/);
    } else if constexpr (STAGED_T) {
      TC* const Cb = C + offC + int64_t(b) * sCb;
      const bool vec = reinterpret_cast<uintptr_t>(C) % 16 == 0;
#pragma unroll
      for (int mi = 0; mi < M_ITERS; ++mi)
        store_staged_t(acc[mi], buf, Cb, vec, b, tile.m0 + wg_row + mi * 64 + warp * 16, tile.n0, M, lane/*$EPARGS$*/);
    } else {
      TC* const Cb = C + offC + int64_t(b) * sCb;
      const bool pairs = PAIRS && reinterpret_cast<uintptr_t>(C) % (2 * sizeof(TC)) == 0;
#pragma unroll
      for (int mi = 0; mi < M_ITERS; ++mi)
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t m = tile.m0 + wg_row + mi * 64 + warp * 16 + lane / 4 + 8 * h;
            const int64_t n = tile.n0 + j * 8 + 2 * (lane % 4);
            float v0 = acc[mi][j * 4 + 2 * h], v1 = acc[mi][j * 4 + 2 * h + 1];
            out_pair(v0, v1, b, m, n, M/*$EPARGS$*/);
            if (m >= M) continue;
            TC* const p = Cb + m * sCm + n * sCn;
            if (pairs && n + 1 < kN) {
              store_pair(p, v0, v1);
            } else {
              if (n < kN) kf_store(p, v0);
              if (n + 1 < kN) kf_store(p + sCn, v1);
            }
          }
    }
  }
  if constexpr (STAGED && SPLITS == 1) {  // the block's shared memory outlives the last store's reads
    if (lane == 0) tma_store_wait();
  }
}

// Persistent: each cluster (or block) walks units c, + clusters, ...; the producer runs ahead
// into the next unit while the consumers store this one. The producer's and the consumers'
// Rings (and the consumers' `last`) carry over from unit to unit, as the slices do (with
// PINGPONG a warpgroup sets its Ring at each of its units, past the other's slices).
__global__ void __launch_bounds__(THREADS, 1) gemm_wgmma(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                                                         const __grid_constant__ CUtensorMap tmC, TC* __restrict__ C, float* __restrict__ W, const Rows rows/*$EPPARAMS$*/) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  // The stages, the consumer warps' epilogue buffers (1024-byte aligned, as TMA's 128-byte
  // swizzle needs), the barriers.
  unsigned char* const epi = smem_raw + (base - smem_u32(smem_raw)) + STAGES * STAGE_BYTES;
  const uint32_t full = base + STAGES * STAGE_BYTES + CONSUMERS * 4 * EPI_WARP_BYTES, empty = full + 8 * STAGES;
  // wg by a shuffle: the compiler then knows it is the same across the warp, and keeps the
  // descriptors built from it in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0), tid = threadIdx.x % 128;
  const int rank = CLUSTER > 1 ? int(cluster_rank()) : 0;
  const int64_t first_unit = blockIdx.x / CLUSTER, unit_step = gridDim.x / CLUSTER;
  if constexpr (SPLITS > 1 || TAIL_SPLIT > 0) launch_dependents();
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, RELEASERS * CLUSTER);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if constexpr (CLUSTER > 1) cluster_sync();  // the peers' barriers are ready before anyone multicasts or arrives
  else __syncthreads();

  // The producer's registers go to the consumers: of the 64 Ki a block of 384 threads
  // (2 consumers) or 512 (3) holds, the producer keeps 40 a thread.
  if (wg == CONSUMERS) {  // producer
    if constexpr (CONSUMERS > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (tid == 0) {
      const int64_t slices = produce(tmA, tmB, base, full, empty, rank, rows, first_unit, unit_step);
      if constexpr (CLUSTER > 1) {  // every block's consumers have handed back the last STAGES slices
        for (int64_t i = slices > STAGES ? slices - STAGES : 0; i < slices; ++i) mbar_wait(empty + 8 * int(i % STAGES), uint32_t(i / STAGES) & 1);
      }
    }
  } else {
    if constexpr (CONSUMERS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    if constexpr (CONSUMERS == 3) asm volatile("setmaxnreg.inc.sync.aligned.u32 152;\n");
    consume(&tmC, C, W, base, full, empty, epi, wg, tid, rank, rows, first_unit, unit_step/*$EPARGS$*/);
  }
}

// cuTensorMapEncodeTiled, from the driver through the runtime (no -lcuda at link time).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                 const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const bool ok = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
                    q == cudaDriverEntryPointSuccess;
    return ok ? reinterpret_cast<EncodeTiled>(p) : nullptr;
  }();
  return fn;
}

// A 3-d map over (contiguous dimension, the other one, batch), in elements, read or written box0
// x box1 at a time.
template <typename E>
cudaError_t make_map(CUtensorMap* map, const E* base, uint64_t inner, uint64_t outer, uint64_t batch, uint64_t s_outer,
                     uint64_t s_batch, uint32_t box0, uint32_t box1) {
  const EncodeTiled encode = encoder();
  if (!encode) return cudaErrorNotSupported;
  const cuuint64_t dims[3] = {inner, outer, batch};
  const cuuint64_t strides[2] = {s_outer * sizeof(E), s_batch * sizeof(E)};
  const CUtensorMapDataType type =
      std::is_same<E, __nv_bfloat16>::value ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const cuuint32_t box[3] = {box0, box1, 1}, unit[3] = {1, 1, 1};
  const CUresult r = encode(map, type, 3, const_cast<E*>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t launch(const T* A, const T* B, TC* C, float* W, int64_t M/*$EPPARAMS$*/, cudaStream_t stream) {
  if (workspace_bytes(M) > 0 && W == nullptr) return cudaErrorInvalidValue;  // the caller gave no workspace
  int device = 0, sms = 0;
  cudaError_t e;
  if ((e = cudaGetDevice(&device)) != cudaSuccess || (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return e;
  const T* a = A + offA;
  const T* b = B + offB;
  unsigned char* const packs = reinterpret_cast<unsigned char*>(W) + align256(partial_bytes(M));
  if constexpr (A_PACKED) {
    T* const copy = reinterpret_cast<T*>(packs);
    if ((e = pack_into(a, copy, $a_inner$, $a_outer$, $a_batch$, $a_src_outer_stride$, $a_src_batch_stride$, $a_outer_stride$, $a_batch_stride$, sms, stream)) != cudaSuccess) return e;
    a = copy;
  }
  if constexpr (B_PACKED) {
    T* const copy = reinterpret_cast<T*>(packs + packed_a_bytes(M));
    if ((e = pack_into(b, copy, $b_inner$, $b_outer$, $b_batch$, $b_src_outer_stride$, $b_src_batch_stride$, $b_outer_stride$, $b_batch_stride$, sms, stream)) != cudaSuccess) return e;
    b = copy;
  }
  CUtensorMap ma, mb, mc = {};  // C's map: written 16 rows x 64 columns at a time, by the staged store only
  e = make_map(&ma, a, $a_inner$, $a_outer$, $a_batch$, $a_outer_stride$, $a_batch_stride$, 64, A_KMAJOR ? SHARE_A : 64);
  if (e == cudaSuccess) e = make_map(&mb, b, $b_inner$, $b_outer$, $b_batch$, $b_outer_stride$, $b_batch_stride$, 64, B_KMAJOR ? SHARE_B : 64);
  // A one-row C has no row stride (sCm is 0 there); the map takes a row's length instead.
  constexpr uint64_t C_ROW = sCm != 0 ? uint64_t(sCm) : (uint64_t(kN) + 7) / 8 * 8;
  if (e == cudaSuccess && STAGED && SPLITS == 1)
    e = make_map(&mc, C + offC, uint64_t(kN), uint64_t(M), uint64_t(kBatch), C_ROW,
                 kBatch > 1 ? uint64_t(sCb) : (uint64_t(M) * C_ROW + 7) / 8 * 8, 64, 16);
  if (e != cudaSuccess) return e;
  static bool configured = false;  // the attribute is per kernel; set once per process
  if (!configured) {
    e = cudaFuncSetAttribute(gemm_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute cluster = {};
  config.blockDim = dim3(THREADS);
  config.dynamicSmemBytes = SMEM_BYTES;
  config.stream = stream;
  int resident = sms;  // clusters that fit at once (one block per SM)
  if constexpr (CLUSTER > 1) {
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = CLUSTER, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    config.gridDim = dim3(unsigned(CLUSTER * sms));
    static int clusters = 0;  // how the GPCs pack clusters, asked once per process
    if (clusters == 0 && (e = cudaOccupancyMaxActiveClusters(&clusters, gemm_wgmma, &config)) != cudaSuccess) return e;
    if (clusters == 0) return cudaErrorInvalidConfiguration;
    resident = clusters;
  }
  const Rows rows = rows_of(M, resident, sms);
  config.gridDim = dim3(unsigned(rows.units < resident ? rows.units : resident) * CLUSTER);
  if ((e = cudaLaunchKernelEx(&config, gemm_wgmma, ma, mb, mc, C, W, rows/*$EPARGS$*/)) != cudaSuccess) return e;
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  // The kernel that adds up the partial sums, launched as the gemm's programmatic dependent.
  cudaLaunchConfig_t reduce = {};
  cudaLaunchAttribute dependent = {};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  reduce.blockDim = dim3(256);
  reduce.stream = stream;
  reduce.attrs = &dependent;
  reduce.numAttrs = 1;
  if constexpr (TAIL_SPLIT > 0) {
    if (rows.tail == 0) return e;
    reduce.gridDim = dim3(unsigned(rows.tail * TILE_QUADS / 256));
    return cudaLaunchKernelEx(&reduce, tail_reduce, static_cast<const float*>(W), C, rows/*$EPARGS$*/);
  }
  if (SPLITS == 1) return e;
  const int64_t quads = tc::reduce_quads(M);
  reduce.gridDim = dim3(unsigned(quads / 256 + 1 < 8 * sms ? quads / 256 + 1 : 8 * sms));
  return cudaLaunchKernelEx(&reduce, tc::splitk_reduce<SPLITS, true>, static_cast<const float*>(W), C, M/*$EPARGS$*/);
}
}  // namespace wg

}  // namespace

extern "C" $DECL$ {
  if (workspace_size) { *workspace_size = wg::workspace_bytes($run_m$); return 0; }  // partial sums, packed copies
/*$SHAPE_CHECK$*//*$NULLCHECKS$*/  // TMA needs 16-byte aligned bases (strides and offsets were checked at render time), and
  // so does the staged store; a view that starts mid-vector runs on the mma_sync kernel instead
  // (a packed operand's copy is aligned whatever the view).
  const bool aligned = (wg::A_PACKED || reinterpret_cast<uintptr_t>($A$ + offA) % 16 == 0) &&
                       (wg::B_PACKED || reinterpret_cast<uintptr_t>($B$ + offB) % 16 == 0) &&
                       (!wg::STAGED || wg::SPLITS > 1 || reinterpret_cast<uintptr_t>($C$ + offC) % 16 == 0);
  // The M the kernels run: M, or with swap_ab (A and B exchanged, C transposed) the constant N is.
  const cudaError_t e = aligned ? wg::launch($A$, $B$, $C$, reinterpret_cast<float*>(workspace), $run_m$/*$EPARGS$*/, stream)
                                : tc::run($A$, $B$, $C$, nullptr, $run_m$/*$EPARGS$*/, stream);
  return e == cudaSuccess ? 0 : 3;
}
// @end wgmma
