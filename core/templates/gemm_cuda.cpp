// The cuda backend of the gemm template: its parameters, defaults (the Hopper tiling by problem
// size), default autotune choices, checks and rendering. The kernels are kernel files:
// float16/bfloat16 on sm_90a with `"mma": "wgmma"`, gemm/wgmma.cuh (a warp-specialized TMA +
// wgmma kernel) after the mma_sync kernel that serves its misaligned views; float16/bfloat16
// elsewhere, gemm/mma_sync.cuh (mma.sync tensor cores, a cp.async pipeline); float32,
// gemm/simt.cuh; the gelus of its epilogues, gemm/gelu.cuh; the reference, gemm/reference.cuh.
#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "core/templates/gemm_backend.hpp"
#include "core/templates/kernel_file.hpp"
#include "core/templates/render_util.hpp"

namespace kforge::core::templates {
namespace {

using nlohmann::json;

// How the Hopper kernel describes a 16-bit operand to the TMA unit: a 3-d tensor map over
// (contiguous dimension, the other one, batch), in elements. `kmajor` says whether the
// contiguous dimension is K. No stride is 0: a dimension of size 1 gets a packed stride.
// `packed`: the operand's own strides or offset are not the 16-byte multiples TMA needs (a
// row of an odd length, say), so the kernel first copies it into the workspace with rows of
// `outer_stride` (its length rounded up to 64 elements) and maps that copy; src_* are the
// operand's own strides, which the copy reads.
struct TmaOperand {
  bool kmajor = true;
  int64_t inner = 0, outer = 0, batch = 1;
  int64_t outer_stride = 0, batch_stride = 0;
  bool packed = false;
  int64_t src_outer_stride = 0, src_batch_stride = 0;
};

// Bytes of the workspace a packed operand's copy takes (256-byte aligned, as each region of
// the wgmma kernel's workspace is: wgmma.cuh's workspace_bytes()).
uint64_t align256(uint64_t x) { return (x + 255) / 256 * 256; }
uint64_t packed_bytes(const TmaOperand& t) { return t.packed ? align256(uint64_t(t.batch) * uint64_t(t.batch_stride) * 2) : 0; }

// With `swap_ab` the Hopper kernel computes C^T = B^T A^T: this problem, its M and N, A and B
// (and their strides) exchanged, C read transposed. M then lies along wgmma's N, whose tiles
// come in steps of 8 rows, not 64: a ragged or small M (258 rows: three 128-row tiles, a third
// of them idle) is cut into tiles that fit it (two of 136).
GemmProblem swapped_ab(const GemmProblem& p) {
  GemmProblem w = p;
  w.M = p.N, w.N = p.M;
  w.sAb = p.sBb, w.sAm = p.sBn, w.sAk = p.sBk, w.offA = p.offB;
  w.sBb = p.sAb, w.sBk = p.sAk, w.sBn = p.sAm, w.offB = p.offA;
  w.sCm = p.sCn, w.sCn = p.sCm;
  w.any_m = false;
  return w;
}
bool swap_ab(const json& params) { return params.is_object() && params.value("swap_ab", 0) != 0; }
// The problem the Hopper kernel runs for a request's params.
GemmProblem wgmma_problem(const GemmProblem& g, const json& params) { return swap_ab(params) ? swapped_ab(g) : g; }
// Whether wgmma.cuh stores C through shared memory and TMA (its STAGED), 64 columns at a time.
bool staged_store(const GemmProblem& p) {
  return (p.out == Dtype::kFloat16 || p.out == Dtype::kBFloat16) && p.sCn == 1 && p.sCm % 8 == 0 && p.sCb % 8 == 0 && p.offC % 8 == 0;
}

// The cuda kernel a request's params select.
enum class CudaMma { kMmaSync, kWgmma, kGemv };
constexpr int64_t kGemvMaxM = 8;  // the rows of C gemv.cuh holds

// Shared memory per block an arch allows (bytes).
int64_t cuda_smem_limit(const std::string& arch) {
  int sm = std::atoi(arch.c_str() + 3);
  if (sm == 80 || sm == 87) return 163 * 1024;
  if (sm == 86 || sm == 89 || sm >= 120) return 99 * 1024;
  if (sm >= 90) return 227 * 1024;
  return 64 * 1024;
}

// The parts a kernel cuts K into for `split_k` (the splits left with K slices to do: slices of
// `depth` shared out evenly, so 5 slices asked to split 4 ways make 3 parts of 2 and 1). The
// Hopper kernel's slices are 64 deep, mma_sync's block_k.
int k_splits(const GemmProblem& p, int split_k, int depth = 64) {
  const int64_t slices = std::max<int64_t>(1, (p.K + depth - 1) / depth), per = (slices + split_k - 1) / split_k;
  return int((slices + per - 1) / per);
}

// Split-K's float partial sums, `splits` slices of [batch][M][N] (none for one part): the
// workspace_bytes() of both kernels, mma_sync.cuh's and wgmma.cuh's (before its packed copies).
uint64_t partial_sums_bytes(const GemmProblem& p, int splits) {
  return splits > 1 ? uint64_t(splits) * uint64_t(p.batch * p.M * p.N) * 4 : 0;
}

// nullopt (with the reason) where TMA cannot load the operand, even copied: neither M/N nor K
// has unit stride, or a dimension or stride is past TMA's range. A stride or offset that is
// not a multiple of 16 bytes makes a packed operand. operand 0 is A, 1 is B.
std::optional<TmaOperand> tma_operand(const GemmProblem& p, int operand, std::string* why = nullptr) {
  const bool a = operand == 0;
  const int64_t mn = a ? p.M : p.N, k = p.K;
  const int64_t s_mn = a ? p.sAm : p.sBn, s_k = a ? p.sAk : p.sBk;
  const int64_t s_b = a ? p.sAb : p.sBb, off = a ? p.offA : p.offB;
  auto fail = [&](std::string reason) -> std::optional<TmaOperand> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  constexpr int64_t kVec = 8;  // 16 bytes of a 16-bit type
  auto round_up = [](int64_t x) { return (x + kVec - 1) / kVec * kVec; };
  TmaOperand t;
  if (s_k == 1 || (k == 1 && s_mn != 1)) {
    t = {true, k, mn, 1, s_mn, 0};
  } else if (s_mn == 1 || mn == 1) {
    t = {false, mn, k, 1, s_k, 0};
  } else {
    return fail("neither its K nor its " + std::string(a ? "M" : "N") + " dimension has stride 1");
  }
  if (t.outer == 1) t.outer_stride = round_up(t.inner);
  t.batch = s_b == 0 ? 1 : p.batch;
  t.batch_stride = t.batch == 1 ? round_up(t.outer_stride * t.outer) : s_b;
  if (t.outer_stride % kVec != 0 || t.batch_stride % kVec != 0 || off % kVec != 0) {
    t.packed = true;
    t.src_outer_stride = t.outer_stride;
    t.src_batch_stride = t.batch == 1 ? 0 : s_b;
    t.outer_stride = (t.inner + 63) / 64 * 64;  // rows on 128 bytes, which TMA reads fastest (default_choices)
    t.batch_stride = t.outer_stride * t.outer;
  }
  // TMA coordinates are 32-bit signed, and a tile may start 256 past the last row.
  constexpr int64_t kMaxStrideBytes = int64_t(1) << 40, kMaxDim = (int64_t(1) << 31) - 256;
  if (t.batch_stride * 2 >= kMaxStrideBytes || t.outer_stride * 2 >= kMaxStrideBytes) return fail("a stride is 2^40 bytes or more");
  if (t.inner > kMaxDim || t.outer > kMaxDim || t.batch > kMaxDim) return fail("a dimension exceeds 2^31 - 256 (TMA coordinates are 32-bit)");
  return t;
}

CudaMma cuda_mma(const json& params) {
  // Read before apply_param_specs() checks types: a `mma` that is not a string (5, null,
  // ["wgmma"]) selects nothing here and is refused there, naming /params/mma.
  if (!params.is_object()) return CudaMma::kMmaSync;
  const auto it = params.find("mma");
  if (it == params.end() || !it->is_string()) return CudaMma::kMmaSync;
  const std::string& mma = it->get_ref<const std::string&>();
  return mma == "wgmma" ? CudaMma::kWgmma : mma == "gemv" ? CudaMma::kGemv : CudaMma::kMmaSync;
}

// The shared memory the Hopper kernel asks for: the stages, 1 KiB to align them for the
// 128-byte swizzle, two mbarriers per stage (rounded to 128 bytes) and each consumer warp's
// 2 KiB epilogue buffer.
int64_t wgmma_smem_bytes(int bm, int bn, int stages, int consumers) {
  return int64_t(stages) * (bm + bn) * 64 * 2 + 1024 + (16 * stages + 127) / 128 * 128 + consumers * 4 * 2048;
}

// The deepest ring of stages (at most `most`) whose shared memory fits an sm_90a block.
int wgmma_stages(int bm, int bn, int consumers, int most) {
  int stages = most;
  while (stages > 2 && wgmma_smem_bytes(bm, bn, stages, consumers) > cuda_smem_limit("sm_90a")) --stages;
  return stages;
}

std::string arch_field(const TemplateRequest& r, size_t i) { return r.archs.size() > 1 ? "/arch/" + std::to_string(i) : "/arch"; }

// The float accumulators a consumer thread may hold. ptxas gives every instruction no more than
// the block size's share of the 64 Ki registers (255 a thread with one consumer, 256 threads;
// 168 with two, 384; 128 with three, 512): one wgmma's accumulators and operands must fit it
// (three consumers' m64n208, 104 accumulators: "Insufficient registers (128) to compile
// instruction"; 96 compile). Past that, a consumer's code runs under the registers setmaxnreg
// gives it (232 with two consumers, 152 with three): two consumers' 256-row tiles hold two
// wgmma tiles a thread, 256x152 and 256x200 swapped compiled with no spills (bias+gelu too),
// 256x192 unswapped spilled 4 bytes with bias+gelu (nvcc 13.0): two consumers hold at most 176.
int wgmma_accumulator_limit(int consumers) { return consumers == 3 ? 96 : consumers == 2 ? 176 : 128; }
// The accumulators a consumer thread holds: bm x bn tiles whose rows `warpgroups` consumers split
// (1 with pingpong, where each holds whole tiles), bn / 2 for each 64-row wgmma tile.
int wgmma_accumulators(int bm, int bn, int warpgroups) { return bm / warpgroups / 64 * bn / 2; }

// A K split into more parts than K has slices of `depth` (`slices_of` names them) leaves
// parts with nothing to do.
void check_split_k(const GemmProblem& g, int split_k, int depth, const std::string& slices_of, Problems& p) {
  if (const int64_t slices = (g.K + depth - 1) / depth; split_k > slices) {
    p.add("/params/split_k", "split_k " + std::to_string(split_k) + " cuts K = " + std::to_string(g.K) + " (" + std::to_string(slices) +
                                 " slices of " + slices_of + ") into parts with nothing to do: it must be at most " + std::to_string(slices));
  }
}

// The decode kernel (gemv.cuh): a few rows of C, B's rows read in aligned 16-byte chunks
// whatever their length, K in up to 8 parts as the blocks of a cluster (sm_90).
void check_gemv(const TemplateRequest& r, const GemmProblem& g, Problems& p) {
  const json& q = r.spec.params;
  if (g.ab == Dtype::kFloat32) return p.add("/params/mma", "gemv takes float16 or bfloat16 operands; float32 runs on the SIMT kernel (mma_sync)");
  for (size_t i = 0; i < r.archs.size(); ++i) {
    if (r.archs[i] != "sm_90a") p.add(arch_field(r, i), "gemv's K parts are the blocks of a cluster: sm_90a, not " + r.archs[i]);
  }
  if (g.M > kGemvMaxM) p.add("/inputs/0/sizes", "gemv holds all of C's rows in each thread: M must be at most 8, not " + std::to_string(g.M));
  if (g.batch != 1) p.add("/inputs/0/sizes", "gemv takes one batch, not " + std::to_string(g.batch));
  if (g.sBn != 1) p.add("/inputs/1/strides", "gemv reads B's rows in 16-byte chunks: B needs unit stride along N");
  for (const char* k : {"cluster_m", "cluster_n"})
    if (q.value(k, 1) != 1) p.add(std::string("/params/") + k, std::string(k) + " is the wgmma kernel's; gemv's clusters are its K parts (split_k)");
  for (const char* k : {"tail_split", "swap_ab", "pingpong"})
    if (q.value(k, 0) != 0) p.add(std::string("/params/") + k, std::string(k) + " is the wgmma kernel's; gemv takes 0");
  const int bn = q["block_n"], warps = q["warps"], unroll = q["stages"], chunks = bn / 8 + 1;
  if (32 % chunks != 0) {
    p.add("/params/block_n", "gemv's warps read a row's block_n columns as block_n / 8 + 1 = " + std::to_string(chunks) +
                                 " 16-byte chunks, whole rows a warp: block_n / 8 + 1 must divide 32 (block_n 8, 24, 56, 120 or 248)");
  }
  if (warps % 8 != 0) p.add("/params/warps", "gemv's warp w reads the rows w % 8 + 8 j, which share where a row starts in its first chunk: 8 or 16 warps, not " + std::to_string(warps));
  if (const int64_t smem = g.M * (warps * (bn + 8) + bn) * 4; smem > 48 * 1024)
    p.add("/params/block_n", "gemv's sums take M x (warps x (block_n + 8) + block_n) x 4 = " + std::to_string(smem) + " bytes of shared memory; the limit is 49152");
  if (const int64_t regs = g.M * (8 + unroll) + 4 * unroll; regs > 192)
    p.add("/params/stages", "gemv holds M x (8 + stages) + 4 x stages = " + std::to_string(regs) + " values a thread in registers; the limit is 192");
}

// The Hopper kernel: warps/4 - 1 consumer warpgroups issue wgmma.m64n<block_n>k16 on
// 64-deep K slices that one producer thread loads with TMA into 128-byte-swizzled shared
// memory, `stages` deep.
void check_wgmma(const TemplateRequest& r, const GemmProblem& request, Problems& p) {
  const json& q = r.spec.params;
  const bool swap = swap_ab(q);
  const GemmProblem g = wgmma_problem(request, q);
  int bm = q["block_m"], bn = q["block_n"], bk = q["block_k"], warps = q["warps"], stages = q["stages"];
  if (g.ab == Dtype::kFloat32) return p.add("/params/mma", "wgmma takes float16 or bfloat16 operands; float32 runs on the SIMT kernel (mma_sync)");
  for (size_t i = 0; i < r.archs.size(); ++i) {
    if (r.archs[i] != "sm_90a") p.add(arch_field(r, i), "wgmma exists only on the arch-specific Hopper target sm_90a, not " + r.archs[i]);
  }
  if (bk != 64) p.add("/params/block_k", "the wgmma kernel loads 64-element (128-byte swizzled) K slices: block_k must be 64, not " + std::to_string(bk));
  if (bn % 64 != 0) {
    // Columns of a K-major B tile are 8-row swizzle atoms; an N-major one is cut into 64-column
    // panels, and the staged store writes C 64 columns at a time. Only the swapped problem
    // (C^T, stored 8 columns at a time) with a K-major A (B^T's operand is A) has neither.
    const auto tb = tma_operand(g, 1);
    if (!swap || !tb || !tb->kmajor || staged_store(g)) {
      p.add("/params/block_n", std::string("the wgmma kernel tiles N in 64-column swizzle atoms: block_n must be 64, 128, 192 or 256") +
                                   (swap ? " (a multiple of 8 needs A with unit K stride: with swap_ab, block_n tiles M)" : " (a multiple of 8 with swap_ab, where it tiles M)"));
    }
  }
  if (warps != 8 && warps != 12 && warps != 16) {
    p.add("/params/warps", "the wgmma kernel runs one producer and one to three consumer warpgroups: warps is 8, 12 or 16, not " + std::to_string(warps));
  } else {
    const int consumers = warps / 4 - 1;
    const bool pingpong = q.value("pingpong", 0) != 0;
    if (pingpong && consumers != 2) {
      p.add("/params/pingpong", "pingpong takes turns between two consumer warpgroups: it needs warps 12, not " + std::to_string(warps));
    } else if (pingpong) {
      // Each warpgroup holds a whole tile.
      if (bm % 64 != 0) p.add("/params/block_m", "with pingpong a warpgroup runs block_m " + std::to_string(bm) + " in 64-row wgmma tiles: it must be a multiple of 64");
      else if (const int acc = wgmma_accumulators(bm, bn, 1), limit = wgmma_accumulator_limit(consumers); acc > limit)
        p.add("/params/block_n", "with pingpong a warpgroup's " + std::to_string(bm) + "x" + std::to_string(bn) + " tile holds " + std::to_string(acc) +
                                     " accumulators per thread; the limit is " + std::to_string(limit) + " (registers)");
    } else if (bm % (64 * consumers) != 0) {
      p.add("/params/block_m", std::to_string(consumers) + " consumer warpgroup(s) split block_m " + std::to_string(bm) + " into 64-row wgmma tiles: it must be a multiple of " + std::to_string(64 * consumers));
    } else if (const int acc = wgmma_accumulators(bm, bn, consumers), limit = wgmma_accumulator_limit(consumers); acc > limit) {
      p.add("/params/block_n", "a " + std::to_string(bm / consumers) + "x" + std::to_string(bn) + " consumer tile holds " + std::to_string(acc) +
                                   " accumulators per thread; the limit is " + std::to_string(limit) +
                                   (consumers == 3 ? " (registers: a block of 512 threads compiles at 128 a thread)" : " (registers)"));
    }
  }
  if (stages < 2) p.add("/params/stages", "the TMA pipeline needs at least 2 stages");
  const int64_t smem = wgmma_smem_bytes(bm, bn, stages, std::max(1, warps / 4 - 1));
  if (smem > cuda_smem_limit("sm_90a")) {
    p.add("/params/stages", std::to_string(stages) + " stages of " + std::to_string(bm) + "x" + std::to_string(bn) + "x64 tiles need " + std::to_string(smem) +
                                " bytes of shared memory; sm_90a has " + std::to_string(cuda_smem_limit("sm_90a")));
  }
  check_split_k(g, q["split_k"], 64, "64", p);
  // A cluster's blocks load shares of a K-major operand's rows in whole 8-row atoms (the last
  // one overlapping where the rows do not divide: wgmma.cuh's share_rows), so any cluster_m and
  // cluster_n that make at most 8 blocks.
  if (const int m = q["cluster_m"], c = q.value("cluster_n", 1); m * c > 8)
    p.add("/params/cluster_n", "a cluster is at most 8 blocks: cluster_m " + std::to_string(m) + " x cluster_n " + std::to_string(c) + " is " + std::to_string(m * c));
  if (q.value("tail_split", 0) != 0 && (q["split_k"] != 1 || q["cluster_m"] != 1 || q.value("cluster_n", 1) != 1))
    p.add("/params/tail_split", "tail_split cuts K itself: it takes split_k 1, cluster_m 1 and cluster_n 1");
  for (int i = 0; i < 2; ++i) {
    std::string why;
    const int input = swap ? 1 - i : i;  // the swapped problem's A is B^T
    if (!tma_operand(g, i, &why)) p.add("/inputs/" + std::to_string(input) + "/strides", std::string(input ? "B" : "A") + " cannot be loaded by TMA for wgmma: " + why);
  }
}

constexpr int64_t kSms = 132;  // an H100 SXM's, which the Hopper defaults and search are tuned for
// Clusters of two and of four that run at once with 128x128 or 128x64 tiles
// (cudaOccupancyMaxActiveClusters on an H200, 132 SMs as the H100's; not measured on an H100).
constexpr int64_t kPairsAtOnce = kSms / 2, kQuadsAtOnce = 30;
// wgmma.cuh's MAX_SLOTS and MAX_PARTS: the tail split's workspace slots (a part of a tile each)
// and the most parts a tile is cut into.
constexpr int64_t kTailSlots = 320, kTailMaxParts = 8;

// Output tiles of bm x bn over the batch.
int64_t tile_count(const GemmProblem& g, int bm, int bn) { return g.batch * ((g.M + bm - 1) / bm) * ((g.N + bn - 1) / bn); }

// How many ways to split K so that `units` blocks of work fill `fill` slots (an H100's 132
// SMs once): none where they already number `enough`; else as many as fit (at most 8),
// keeping at least 4 K slices of `depth` in each.
int split_to_fill(const GemmProblem& g, int64_t units, int64_t enough, int64_t fill = kSms, int depth = 64) {
  if (units >= enough) return 1;
  int64_t split = std::min<int64_t>(8, fill / units);
  while (split > 1 && (g.K + depth - 1) / depth / split < 4) --split;
  return int(split);
}
// The default's split for bm x bn tiles: none once they fill half of the SMs.
int small_problem_split_k(const GemmProblem& g, int bm, int bn) { return split_to_fill(g, tile_count(g, bm, bn), kSms / 2); }

// Whether the Hopper kernel can run this request (its defaults and choices). The catalog
// asks with no tensors at all.
bool wgmma_viable(const TemplateRequest& r) {
  if (r.archs.empty() || r.spec.inputs.size() < 2) return false;
  if (std::any_of(r.archs.begin(), r.archs.end(), [](const std::string& a) { return a != "sm_90a"; })) return false;
  const GemmProblem g = gemm_problem(r.spec);
  return g.ab != Dtype::kFloat32 && tma_operand(g, 0) && tma_operand(g, 1);
}


// The Hopper kernel's tiling, for `"mma": "wgmma"` alone and for sm_90a requests without params.
const json kWgmmaDefaults = {{"block_m", 128}, {"block_n", 256}, {"block_k", 64}, {"warps", 12}, {"stages", 4}, {"split_k", 1}, {"tail_split", 0}, {"cluster_m", 1}, {"swap_ab", 0}, {"mma", "wgmma"}};
// gemv.cuh's, for `"mma": "gemv"` alone: 56 columns a block of 8 warps (8 chunks of a row, 32 rows at once), 4 rows in flight a thread.
const json kGemvDefaults = {{"block_m", 32}, {"block_n", 56}, {"block_k", 64}, {"warps", 8}, {"stages", 4}, {"split_k", 1}, {"mma", "gemv"}};

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

// The wgmma call for one m64n<bn>k16 tile: bn/2 float accumulators per thread, both
// operands from shared-memory descriptors, transposed where the tile is M- or N-major.
std::string wgmma_function(int bn, const std::string& type, bool a_kmajor, bool b_kmajor) {
  const int regs = bn / 2;
  std::ostringstream o;
  o << "__device__ __forceinline__ void wgmma(float (&d)[BN / 2], uint64_t a, uint64_t b) {\n"
    << "  asm volatile(\n      \"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << regs + 2 << ", 0;\\n\"\n"
    << "      \"wgmma.mma_async.sync.aligned.m64n" << bn << "k16.f32." << type << "." << type << " {\"\n      \"";
  for (int i = 0; i < regs; ++i) o << "%" << i << (i + 1 < regs ? (i % 16 == 15 ? ", \"\n      \"" : ", ") : "");
  o << "}, %" << regs << ", %" << regs + 1 << ", p, 1, 1, " << (a_kmajor ? 0 : 1) << ", " << (b_kmajor ? 0 : 1) << ";\\n}\\n\"\n      : ";
  for (int i = 0; i < regs; ++i) o << "\"+f\"(d[" << i << "])" << (i + 1 < regs ? (i % 8 == 7 ? ",\n        " : ", ") : "");
  o << "\n      : \"l\"(a), \"l\"(b), \"r\"(1));\n}\n";
  return o.str();
}

class CudaGemm final : public GemmBackend {
 public:
  std::vector<ParamSpec> params(const TemplateRequest& req) const override;
  std::vector<json> default_choices(const TemplateRequest& req) const override;
  void complete_params(json& params) const override;
  void choose_params(TemplateRequest& req, const GemmProblem& g) const override;
  void check(const TemplateRequest& req, const GemmProblem& g, Problems& p) const override;
  bool runtime_m(const TemplateRequest& req, const GemmProblem& g) const override;
  std::string gelu_function(bool tanh) const override;
  std::string gelu_pair_function() const override;
  std::string render(const TemplateRequest& req, const GemmProblem& g, const KernelSignature& sig, const EpilogueCode& ep,
                     bool reference, uint64_t& workspace_bytes) const override;
};

// Every multiple of 8 up to 256: mma_sync and SIMT tilings check their own; wgmma takes 64-column
// multiples, and any of these with swap_ab (tiles of M).
std::vector<json> block_n_values() {
  std::vector<json> v;
  for (int bn = 8; bn <= 256; bn += 8) v.push_back(bn);
  return v;
}

std::vector<ParamSpec> CudaGemm::params(const TemplateRequest&) const {
  return {{"block_m", "int", ints({32, 64, 128, 192, 256}), 128, "rows of C per thread block (192: wgmma's, with 16 warps)"},
          {"block_n", "int", block_n_values(), 128,
           "columns of C per thread block (wgmma: 64, 128, 192 or 256; with swap_ab, rows of C: any multiple of 8 up to 256)"},
          {"block_k", "int", ints({8, 16, 32, 64}), 32, "depth of a shared-memory stage"},
          {"warps", "int", ints({1, 2, 4, 8, 12, 16}), 8,
           "warps per block: mma_sync, a 2 x warps/2 warp grid from 4 on; wgmma, 8, 12 or 16 (one producer and one to three "
           "consumer warpgroups: 16 with 192-row tiles, three of 64 rows)"},
          {"stages", "int", ints({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}), 3, "shared-memory pipeline stages (cp.async for mma_sync, TMA for wgmma; 16-bit types)"},
          {"split_k", "int", ints({1, 2, 3, 4, 5, 6, 7, 8}), 1,
           "16-bit types (wgmma and mma_sync): parts K is cut into, each a unit of work whose float partial sums a second "
           "kernel adds up (workspace_bytes: split_k x batch x M x N x 4); for problems with too few tiles to fill the GPU"},
          {"tail_split", "int", ints({0, 1}), 0,
           "wgmma only: 1 cuts the tiles of a partial last wave of resident blocks into parts of K, as many as the idle SMs "
           "take (32 tiles past two waves of 132: 4 parts each), whose float partial sums a second kernel adds up "
           "(workspace_bytes: 320 tiles of block_m x block_n x 4); 0: every tile whole"},
          {"cluster_m", "int", ints({1, 2, 3, 4}), 1,
           "wgmma only: blocks per thread-block cluster, on consecutive tiles of one column that share B, each loading "
           "1 / cluster_m of B and multicasting it to all"},
          {"cluster_n", "int", ints({1, 2, 3, 4}), 1,
           "wgmma only: the cluster's tile columns; its cluster_m x cluster_n blocks (at most 8) take neighbouring tiles, "
           "those of a row sharing A, those of a column B: each loads 1 / cluster_n of A and multicasts it along its row"},
          {"pingpong", "int", ints({0, 1}), 0,
           "wgmma only, with 12 warps: 1 gives each of the two consumer warpgroups whole tiles, every other one of its "
           "block's (block_m rows a warpgroup, so block_m / 64 x block_n / 2 accumulators a thread, at most 176), their "
           "main loops taking turns, so that one's epilogue overlaps the other's wgmmas; 0: the two split each tile's rows"},
          {"swap_ab", "int", ints({0, 1}), 0,
           "wgmma only: 1 computes C^T = B^T A^T, so that block_n tiles M in steps of 8 (a ragged or small M: 258 rows in "
           "two tiles of 136, not three of 128); the kernel is then compiled for the request's M (none at run time), "
           "and A needs unit K stride where block_n is not a multiple of 64"},
          {"mma", "enum", {"mma_sync", "wgmma", "gemv"}, "mma_sync",
           "tensor-core path for 16-bit types: mma_sync (sm_80 on, cp.async + ldmatrix) or wgmma (sm_90a only: TMA loads, "
           "warp-specialized producer/consumer warpgroups); when params is omitted on sm_90a, the wgmma default is used. gemv "
           "(sm_90a, M <= 8, B with unit N stride): no tensor cores, B's rows streamed in 16-byte chunks whatever their "
           "alignment, block_n columns a block of 8 or 16 warps (block_n / 8 + 1 must divide 32), stages rows in "
           "flight a thread, K in split_k parts as the blocks of a cluster; block_m and block_k unused"}};
}

std::vector<json> CudaGemm::default_choices(const TemplateRequest& req) const {
  std::vector<json> out;
  if (!req.spec.inputs.empty() && req.spec.inputs[0].dtype == Dtype::kFloat32) {
    for (auto [bm, bn, bk, w] : std::vector<std::tuple<int, int, int, int>>{
             {128, 128, 8, 8}, {128, 128, 16, 8}, {64, 128, 16, 4}, {128, 64, 16, 4}, {64, 64, 16, 4}, {64, 64, 8, 2}}) {
      out.push_back({{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"warps", w}, {"stages", 1}});
    }
    return out;
  }
  if (wgmma_viable(req)) {
    // Hopper: the wgmma tilings only (two consumers with 64- or 128-row tiles, one
    // consumer for narrow or skinny problems): mma_sync won none of the 28 shapes of
    // docs/BENCHMARKS.md's suite on the H100. Where even the largest tiles fill every SM
    // at least once, the problem is compute-bound and a cost model prunes before anything
    // compiles: a tiling's time is its waves (units of work over the SMs, rounded up) times
    // its tile's work over the tensor-core efficiency its shape reaches (1 for 128x256,
    // down to 0.7 for 64x128 and 0.5 for 64x64: rough figures read off the suite runs in docs/BENCHMARKS.md,
    // not a fit; one consumer warpgroup's 64x256 and 128x128, 0.65 and 0.68, from the issue-42
    // rankings, where they took 1.3-1.6x the time of the two-consumer tiles of the same waves;
    // three consumers' 192x192 and 192x128, 0.975 and 0.93, from H100 rankings at 3072^3,
    // 0.0795, 0.0816 and 0.0826 ms for 192x192, 128x192 and 192x128); tilings estimated 15 % or
    // more behind the best are not tried (at 4096^3 that leaves 7 of 14 with the tail-split
    // ones, as many as a cold autotune times in 15 s). Only these problems
    // try 128x256 in clusters of two, which move a third less through L2 and won the wide
    // LLM projections but lose a little where tiles are few (unless B's rows are off 128
    // bytes: below). Smaller problems are memory-
    // or latency-bound, where the model ranks badly (128x64 won 128x4096x4096), so they
    // try every tiling without clusters, 64x64 tiles too (2-3 % ahead of the searched ones at
    // 128x4096x4096 and 128x4096x11008). Where M fits one 64-row tile (decode: M of 1 to 64),
    // a taller tile only computes zeros: they ranked below every 64-row tiling in all 8 such
    // autotunes of the H100 runs of commit 7b57724, so only 64-row tilings are tried; and
    // 192-row tiles only where M > 128 (over fewer rows a third or more of the tile is zeros).
    const GemmProblem g = gemm_problem(req.spec);
    struct Tiling {
      int bm, bn, warps, stages;
      double efficiency;
      int cluster_m = 1;
    };
    static const std::vector<Tiling> kTilings = {{128, 256, 12, 4, 1.0}, {128, 256, 12, 3, 1.0}, {256, 128, 12, 4, 1.0}, {128, 128, 12, 6, 0.9},
                                                 {128, 128, 8, 6, 0.68}, {128, 192, 12, 5, 0.95}, {192, 192, 16, 4, 0.975}, {192, 128, 16, 5, 0.93},
                                                 {64, 256, 8, 5, 0.65}, {64, 128, 8, 8, 0.7}, {128, 64, 12, 8, 0.7}, {64, 64, 8, 8, 0.5},
                                                 {128, 256, 12, 4, 1.0, 2}, {128, 256, 12, 3, 1.0, 2}, {192, 192, 16, 4, 0.975, 2}};
    // Rows of an operand that do not start on 128 bytes (a leading dimension off 64 elements:
    // 2600 or 2792 columns of B) cost a TMA box row two L2 requests instead of one, and a tile
    // that asks for more than 512 a K slice waits on them: on the H100, 1212x2600x6888's
    // 128x256 tiles took 0.1228 ms against 0.0732 at 1212x2600x6912 (A's rows aligned, 256x128)
    // and 6401x2792x1040's 192x192 0.0836. A cluster of two reads B once for both blocks
    // (multicast), halving its requests: 0.0891 and 0.0687 ms, 0.96x and 0.93x cuBLAS (0.74x
    // and 0.86x before; cuBLAS runs clusters of two there). The estimate scales a tile's work by
    // its requests over 512 where they are more; aligned rows never reach it (128x256: 384).
    const auto ta = tma_operand(g, 0), tb = tma_operand(g, 1);
    auto off_128 = [](const std::optional<TmaOperand>& t) { return t && t->outer > 1 && t->outer_stride * 2 % 128 != 0; };
    const bool a_off = off_128(ta), b_off = off_128(tb);
    auto requests_of = [&](int a_rows, int b_rows, int cluster) {
      return std::max(1.0, (a_rows * (a_off ? 2.0 : 1.0) + b_rows * (b_off ? 2.0 : 1.0) / cluster) / 512);
    };
    auto requests = [&](const Tiling& t) { return requests_of(t.bm, t.bn, t.cluster_m); };
    auto estimate = [&](const Tiling& t) {
      return double((tile_count(g, t.bm, t.bn) + kSms - 1) / kSms) * t.bm * t.bn / t.efficiency * requests(t);
    };
    // K split so that fewer tiles than SMs fill them: the split's waves of a split's work, and
    // 10 % for the partial sums and adding them up.
    auto estimate_split = [&](const Tiling& t, int split) {
      const int64_t units = tile_count(g, t.bm, t.bn) * split;
      return 1.1 * double((units + kSms - 1) / kSms) * t.bm * t.bn / t.efficiency * requests(t) / split;
    };
    // With tail_split the last, partial wave's tiles are parts of K in as many waves as
    // cuda_tail_parts() counts, plus 0.4 of a whole tile's time for storing the partial sums
    // and adding them up (what four H100 rankings of whole against cut tails came to:
    // 4647x2048x7168, 3072^3, 2048x11008x4096 and 11585x1536x4096 took 0.55-0.7 of a tile
    // for tails cut into 4 to 7 parts).
    auto estimate_tail = [&](const Tiling& t) {
      const int64_t tiles = tile_count(g, t.bm, t.bn), tail = tiles % kSms, parts = cuda_tail_parts(tail, kSms, (g.K + 63) / 64);
      if (parts == 1) return estimate(t);
      const double waves = double(tiles / kSms) + double((tail * parts + kSms - 1) / kSms) / double(parts) + 0.4;
      return waves * t.bm * t.bn / t.efficiency * requests(t);
    };
    const bool compute_bound = tile_count(g, 128, 256) >= kSms;
    // A tile taller than M needs: over M <= 64 anything past 64 rows, over M <= 128 the
    // 192-row tile, computes mostly zeros (see above).
    auto too_tall = [&](const Tiling& t) { return (g.M <= 64 && t.bm > 64) || (g.M <= 128 && t.bm == 192); };
    // Clusters of two where the problem is compute-bound (128x256; 192x192 where B's rows are
    // off 128 bytes, as above), or where they are and the tiles fill half the SMs in two rows or more.
    auto clusters_pay = [&](const Tiling& t) {
      if (t.cluster_m == 1) return true;
      if (compute_bound) return t.bm != 192 || b_off;
      return b_off && !too_tall(t) && tile_count(g, t.bm, t.bn) >= kSms / 2 && (g.M + t.bm - 1) / t.bm >= 2;
    };
    double best = std::numeric_limits<double>::max();
    for (const Tiling& t : kTilings) {
      if (clusters_pay(t)) best = std::min(best, estimate(t));  // the whole tiles' best prunes them
    }
    std::vector<std::pair<double, json>> tails;
    for (const Tiling& t : kTilings) {
      json c = {{"block_m", t.bm}, {"block_n", t.bn}, {"block_k", 64}, {"warps", t.warps}, {"stages", t.stages}, {"split_k", 1},
                {"cluster_m", t.cluster_m}, {"mma", "wgmma"}};
      // A partial last wave (4647x2048x7168 in 128x256 tiles: 2 waves and 32 tiles, 0.84x
      // cuBLAS) whose tiles cut into parts of K the model puts 3 % or more ahead of the whole
      // tiles and within the pruning margin: the three best tile shapes, whether or not their
      // whole tiles are tried (513x6848x2560: 135 tiles of 128x256, a wave and 3, pruned
      // whole, third of the model's three and first on the H100).
      const bool new_tiles = std::none_of(tails.begin(), tails.end(), [&](const auto& have) {
        return have.second["block_m"] == t.bm && have.second["block_n"] == t.bn;
      });
      if (const double e = estimate_tail(t); compute_bound && new_tiles && t.cluster_m == 1 && e < 0.97 * estimate(t) && e <= 1.15 * best) {
        json tailed = c;
        tailed["tail_split"] = 1;
        tails.push_back({e, std::move(tailed)});
      }
      if (!clusters_pay(t) || (compute_bound ? estimate(t) > 1.15 * best : too_tall(t))) continue;
      out.push_back(std::move(c));
    }
    std::stable_sort(tails.begin(), tails.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (tails.size() > 3) tails.resize(3);
    for (auto& [e, c] : tails) out.push_back(std::move(c));
    // pingpong (two warpgroups in turns on whole tiles, one's epilogue under the other's wgmmas)
    // pays where the epilogue weighs against a tile's main loop: an epilogue fused, or a short K
    // (32 slices or fewer). There, where the problem is compute-bound, 128x128 with it in pairs
    // (estimated at 0.97). On the H200 (bench/gemm_ab.py, fp16) 2048x11008x4096 with bias + gelu
    // took 0.2753 ms so (0.2769 alone), 1.05x cuBLASLt's fused epilogue and 1.01x torch.mm's
    // plain gemm, where 128x256 in pairs took 0.3086; 4096^3 without an epilogue, 0.1916 against
    // 128x256 in pairs' 0.1896, so not there.
    const bool epilogue_weighs = !req.spec.epilogue.empty() || g.K <= 2048;
    if (compute_bound && epilogue_weighs && estimate({128, 128, 12, 6, 0.97, 2}) <= 1.15 * best) {
      out.push_back({{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"warps", 12}, {"stages", 6}, {"split_k", 1}, {"cluster_m", 2},
                     {"pingpong", 1}, {"mma", "wgmma"}});
    }
    // Fewer tiles than SMs (a skinny or ragged M, a small problem): each SM then streams a
    // whole K range on its own, at the bandwidth one SM gets from L2, while the others idle
    // (257x4096x4096 in 66 tiles of 128x192: 0.78x cuBLAS). The tilings whose K split fills
    // the SMs the model puts 3 % or more ahead of their whole tiles, the three best, within
    // the pruning margin of the best.
    std::vector<std::pair<double, json>> splits;
    std::set<std::pair<int, int>> split_tiles = {{64, 128}};  // 64x128 below, as the default splits it
    double best_split = best;  // the best of the whole tiles and their splits (64x128's too): what swap_ab must beat
    for (const Tiling& t : kTilings) {
      const int split = split_to_fill(g, tile_count(g, t.bm, t.bn), kSms * 2 / 3);
      if (t.cluster_m > 1 || split < 2 || too_tall(t)) continue;
      const double e = estimate_split(t, split);
      best_split = std::min(best_split, e);
      if (!split_tiles.insert({t.bm, t.bn}).second) continue;
      if (e < 0.97 * estimate(t) && e <= 1.15 * best) {
        splits.push_back({e, {{"block_m", t.bm}, {"block_n", t.bn}, {"block_k", 64}, {"warps", t.warps}, {"stages", t.stages}, {"split_k", split},
                              {"cluster_m", 1}, {"mma", "wgmma"}}});
      }
    }
    std::stable_sort(splits.begin(), splits.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (splits.size() > 3) splits.resize(3);
    for (auto& [e, c] : splits) out.push_back(std::move(c));
    // A few rows of tiles (a skinny or ragged M: 257 rows are three of 128) against many
    // columns: every row of tiles reads all of B through L2, which then bounds the time (257x
    // 4096x4096 moved 140 MB from L2 in 35 us at 0.78x cuBLAS, whole or split). A column's
    // rows of tiles as one cluster read B once and multicast it (cluster_m = the rows, up to
    // 4), with K split where the clusters' blocks fill less than two thirds of the SMs. Ranked
    // by the bytes they move from L2 over the share of the SMs they keep busy, the three best.
    if (!compute_bound && g.batch == 1) {
      std::vector<std::pair<double, json>> clusters;
      std::set<std::pair<int, int>> seen;
      for (const Tiling& t : kTilings) {
        const int64_t rows = (g.M + t.bm - 1) / t.bm, cols = (g.N + t.bn - 1) / t.bn;
        if (t.cluster_m > 1 || rows < 2 || rows > 4 || !seen.insert({t.bm, t.bn}).second) continue;
        const int c = int(rows);
        // A K-major B whose rows do not split into whole 8-row atoms per block would load the
        // shares' overlap twice (wgmma.cuh's share_rows); not measured here, so not tried.
        if (tb && tb->kmajor && (t.bn % c != 0 || t.bn / c % 8 != 0)) continue;
        const int64_t blocks = rows * cols;
        const int split = split_to_fill(g, blocks, kSms * 2 / 3);
        const double bytes = double(cols) * double(g.M) * double(g.K) + double(g.K) * double(g.N);
        const double busy = std::min(1.0, double(blocks * split) / double(kSms));
        clusters.push_back({bytes / busy, {{"block_m", t.bm}, {"block_n", t.bn}, {"block_k", 64}, {"warps", t.warps}, {"stages", t.stages},
                                           {"split_k", split}, {"cluster_m", c}, {"mma", "wgmma"}}});
      }
      std::stable_sort(clusters.begin(), clusters.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      if (clusters.size() > 3) clusters.resize(3);
      for (auto& [e, c] : clusters) out.push_back(std::move(c));
    }
    // A small problem (not compute-bound) whose A or B rows are off 128 bytes: clusters that
    // multicast that operand (cluster_n 2 shares A along a row of tiles, cluster_m 2 B along a
    // column) halve its requests. 1000^3 on the H200 (bench/gemm_ab.py, fp16): 128x64 tiles
    // 0.0158 ms alone, 0.0134 in 1x2; 128x128 0.0145 alone, 0.0135 in 2x2 (cuBLAS 0.0116, in
    // clusters of 4x2); pairs gained nothing where the rows are aligned (1024^3, 961x1536x1024,
    // 512x2048x2048: 0-5 % slower). For 128x128 and 128x64, the first of 2x2 (both off), 1x2
    // (A off), 2x1 (B off) whose clusters all run at once (kPairsAtOnce, kQuadsAtOnce; 128x64 in
    // 2x2 at 1000^3 is 32 clusters, two rounds, 0.0159).
    if (!compute_bound && g.batch == 1 && g.M > 64 && (a_off || b_off)) {
      for (auto [bm, bn, stages] : {std::tuple{128, 128, 6}, std::tuple{128, 64, 8}}) {
        const int64_t rows = (g.M + bm - 1) / bm, cols = (g.N + bn - 1) / bn;
        for (auto [cm, cn] : {std::pair{2, 2}, std::pair{1, 2}, std::pair{2, 1}}) {
          if ((cm == 2 && !b_off) || (cn == 2 && !a_off)) continue;
          const int64_t clusters = (rows + cm - 1) / cm * ((cols + cn - 1) / cn);
          if (clusters > (cm * cn == 4 ? kQuadsAtOnce : kPairsAtOnce)) continue;
          out.push_back({{"block_m", bm}, {"block_n", bn}, {"block_k", 64}, {"warps", 12}, {"stages", stages}, {"split_k", 1},
                         {"cluster_m", cm}, {"cluster_n", cn}, {"mma", "wgmma"}});
          break;
        }
      }
    }
    // A ragged or small M (258 rows: three 128-row tiles, the last one all but idle) runs
    // better swapped (swap_ab: C^T = B^T A^T), where M lies along wgmma's N and is cut into
    // tiles of any multiple of 8 rows: 258 in two of 136. The same freedom fits a partial wave:
    // 3163x1024x1024 in 128x200 swapped tiles is 128 tiles, one wave (0.0156 ms on the H100,
    // 0.0180 for 128x128's 1.5 waves, cuBLAS 0.0151). For 64- to 256-row tiles of N, every
    // tiling of M in 1 to 8 tiles (of 8 rows or more) or in more tiles of 64 rows or more, K
    // split where they leave SMs idle, estimated by
    // the same model (wgmma's efficiency falling with its N: 1.0 at 256 to 0.6 under 64); the
    // three best, where they are 3 % or more ahead of the best whole or split tiles unswapped
    // (an M of 128 gains nothing: its swapped tilings are its own, transposed; nor does 4096^3).
    // Needs A with unit K stride (it is B^T's K-major operand).
    const GemmProblem w = swapped_ab(g);
    const auto wa = tma_operand(w, 0), wb = tma_operand(w, 1);
    if (wa && wb && wb->kmajor && !staged_store(w)) {
      std::vector<std::pair<double, json>> swaps;
      // An M off 64-row tiles: within the pruning margin of the best unswapped tiling, as the
      // model misjudges them there. On the H100, 257x28720x7168's 256x136 (B's rows off 128
      // bytes, so the model put it 15 % behind 128x136) took 0.2121 ms against 128x136's 0.2564
      // (cuBLAS 0.1930), and 844x6904x2560's 128x216 (12 % behind 128x192 whole tiles, and
      // behind three other swapped tilings) 0.0573 against 0.0697 (cuBLAS 0.0587).
      const bool ragged = g.M % 64 != 0;
      std::optional<std::tuple<int64_t, int, json>> fewest;  // 128-row tiles: the fewest waves (and the narrowest of those)
      for (auto [bm, warps, scale] : {std::tuple{128, 12, 1.0}, std::tuple{64, 8, 0.85}, std::tuple{192, 16, 1.1}, std::tuple{256, 12, 1.1}}) {
        // 192- and 256-row tiles of N only where the tiles fill the SMs (513x7736x2560,
        // 258x28672x7200): at 257x4096x4096 (48 tiles of 128x256) 192-row ones pushed out 64x136
        // and 128x72, the H100's two best (0.0280 and 0.0302 ms against 0.0336 without them).
        // 256 rows are cuBLAS's tiles at 1204x8192x2048 (256x152: M in 8 tiles, 2 waves). Also
        // where 128x256 tiles fill half the SMs: 283x9216x3072 (108 of them, a third row of 27)
        // in 256x96 and in 192x144 took 0.0387 ms with bias + gelu against 0.0394 for 128x256
        // and 0.0399 for 128x96 swapped (H200, bench/gemm_ab.py, fp16; cuBLASLt 0.0362).
        if (bm >= 192 && (g.M <= 128 || (!compute_bound && tile_count(g, 128, 256) < kSms / 2))) continue;
        const int consumers = warps / 4 - 1, max_bn = wgmma_accumulator_limit(consumers) * 2 / (bm / consumers / 64);
        // Each tiling of M once, widest first: t tiles of bn rows, bn the narrowest multiple of 8
        // that cuts M into t (at most 32 widths, whatever M).
        for (int bn = std::min(256, max_bn) / 8 * 8; g.M > 0 && bn >= 8; bn -= 8) {
          const int64_t t = (g.M + bn - 1) / bn;
          if (((g.M + t - 1) / t + 7) / 8 * 8 != bn) continue;
          // Past 8 tiles of M only a ragged M's, 64 rows or more: each tile of M reads all of B,
          // and an M of 64-row tiles has these tilings unswapped.
          if (t > 8 && (bn < 64 || !ragged)) continue;
          const double efficiency = scale * (bn >= 256 ? 1.0 : bn >= 192 ? 0.95 : bn >= 128 ? 0.9 : bn >= 64 ? 0.8 : 0.6);
          const int64_t tiles = tile_count(w, bm, bn);
          const int split = split_to_fill(w, tiles, kSms * 2 / 3);
          const double requests = requests_of(bn, bm, 1);  // swapped: a tile's rows are B's, its columns A's
          const double e = (split > 1 ? 1.1 : 1.0) * double((tiles * split + kSms - 1) / kSms) * bm * bn / efficiency * requests / split;
          const int stages = wgmma_stages(bm, bn, consumers, 8);
          if (e < (ragged ? 1.15 : 0.97) * best_split) {
            json c = {{"block_m", bm}, {"block_n", bn}, {"block_k", 64}, {"warps", warps}, {"stages", stages}, {"split_k", split},
                      {"cluster_m", 1}, {"swap_ab", 1}, {"mma", "wgmma"}};
            const int64_t waves = (tiles * split + kSms - 1) / kSms;
            if (bm == 128 && (!fewest || std::tie(waves, bn) < std::tie(std::get<0>(*fewest), std::get<1>(*fewest)))) fewest = {waves, bn, c};
            swaps.push_back({e, std::move(c)});
          }
        }
      }
      // The three best of 64- to 192-row tiles, and the best of 256 rows besides (at 258x28672x7200
      // 256x136 and 256x88 would push out 128x136, the H100's best there before 256-row tiles).
      std::stable_sort(swaps.begin(), swaps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      const auto tall = std::find_if(swaps.begin(), swaps.end(), [](const auto& s) { return s.second["block_m"] == 256; });
      std::optional<json> best_tall;
      if (tall != swaps.end()) best_tall = tall->second;
      std::erase_if(swaps, [](const auto& s) { return s.second["block_m"] == 256; });
      if (swaps.size() > 3) swaps.resize(3);
      for (auto& [e, c] : swaps) out.push_back(std::move(c));
      if (best_tall) out.push_back(std::move(*best_tall));
      // And, of the 128-row tilings within the margin, the one in the fewest waves (the narrowest
      // of equals) where M is ragged and the problem compute-bound (where it is not, tiles of M
      // narrower than needed read B again for nothing).
      if (compute_bound && ragged && fewest && std::find(out.begin(), out.end(), std::get<2>(*fewest)) == out.end()) out.push_back(std::get<2>(*fewest));
      // And where an operand's rows are off 128 bytes, cuBLAS's tiles at 2315x10776x3104 (A and
      // B off; nvjet_sm90_hsh_256x160_64x4_2x1): 256 rows of N, M in the tiles (176 rows or
      // fewer) that take the fewest waves, the narrowest of equals, in pairs along N (cluster_m
      // 2, each block loading half of A's rows: whole 8-row atoms) where pairing the rows of
      // tiles adds no wave. The model, which counts no pairs here, put 256x160 45 % behind 128x256
      // in pairs there; in the H200's autotune (fp16) they took 0.2707 and 0.2832 ms (cuBLAS
      // 0.2596); in one A/B (bench/gemm_ab.py) 0.2655 in pairs, 0.2691 alone, 128x256 in pairs 0.2710.
      if (compute_bound && ragged && (a_off || b_off)) {
        const int64_t rows = (w.M + 255) / 256;
        std::optional<std::pair<int64_t, int>> tall_fewest;  // waves, block_n
        for (int bn = 176; bn >= 64; bn -= 8) {
          const int64_t t = (g.M + bn - 1) / bn;
          if (((g.M + t - 1) / t + 7) / 8 * 8 != bn) continue;
          const int64_t waves = (rows * t + kSms - 1) / kSms;
          if (!tall_fewest || waves <= tall_fewest->first) tall_fewest = {waves, bn};
        }
        if (tall_fewest) {
          const auto [waves, bn] = *tall_fewest;
          const bool pairs = bn % 16 == 0 && ((rows + 1) / 2 * 2 * ((g.M + bn - 1) / bn) + kSms - 1) / kSms == waves;
          json c = {{"block_m", 256}, {"block_n", bn}, {"block_k", 64}, {"warps", 12}, {"stages", wgmma_stages(256, bn, 2, 8)}, {"split_k", 1},
                    {"cluster_m", pairs ? 2 : 1}, {"swap_ab", 1}, {"mma", "wgmma"}};
          if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(std::move(c));
        }
      }
      // Where compute-bound and the epilogue weighs (above), each swapped 128-row tiling of whole
      // tiles that a warpgroup can hold (M in tiles of 176 rows or fewer) with pingpong as well:
      // 2349x3584x1024 in 128x168 took 0.0308 ms on the H200 with it, 0.0323 without (torch.mm
      // 0.0284; cuBLAS's kernel there is the same tiling, nvjet's 128x168 without `coop`).
      if (compute_bound && epilogue_weighs) {
        const size_t swapped = out.size();
        for (size_t i = 0; i < swapped; ++i) {
          const json& c = out[i];
          if (c.value("swap_ab", 0) == 1 && c["block_m"] == 128 && c["block_n"].get<int>() <= 176 && c["split_k"] == 1) {
            json twin = c;
            twin["pingpong"] = 1;
            out.push_back(std::move(twin));
          }
        }
      }
      // The same small problem with rows off 128 bytes (above) swapped, in the clusters that
      // multicast the swapped problem's off operands: 128-row tiles of N, M in the narrowest
      // tiles (64 to 128 rows) whose clusters all run at once. cuBLAS runs 1000^3 so (128x72
      // in 4x2); on the H200 (bench/gemm_ab.py, fp16) 128x72 in 2x2 took 0.0102 ms, 4x2 0.0104,
      // alone 0.0134, against 0.0117 for 128x128 in 2x2 and torch.mm's 0.0099.
      const bool wa_off = off_128(wa), wb_off = off_128(wb);
      if (!compute_bound && g.batch == 1 && (wa_off || wb_off)) {
        const int64_t rows = (w.M + 127) / 128;
        bool found = false;
        for (auto [cm, cn] : {std::pair{2, 2}, std::pair{1, 2}, std::pair{2, 1}}) {
          if (found || (cm == 2 && (!wb_off || rows < 2)) || (cn == 2 && !wa_off)) continue;
          for (int64_t t = (w.N + 63) / 64; t >= 1 && !found; --t) {  // the narrowest tiles first
            const int bn = int(((w.N + t - 1) / t + 7) / 8 * 8);
            if (bn > 128 || (w.N + bn - 1) / bn != t) continue;  // t tiles of bn, no wider than the unswapped 128x128
            const int64_t clusters = (rows + cm - 1) / cm * ((t + cn - 1) / cn);
            if (clusters > (cm * cn == 4 ? kQuadsAtOnce : kPairsAtOnce)) continue;
            out.push_back({{"block_m", 128}, {"block_n", bn}, {"block_k", 64}, {"warps", 12}, {"stages", wgmma_stages(128, bn, 2, 8)}, {"split_k", 1},
                           {"cluster_m", cm}, {"cluster_n", cn}, {"swap_ab", 1}, {"mma", "wgmma"}});
            found = true;
          }
        }
      }
    }
    // Few rows streaming B (M <= 256, not compute-bound): the time is B's bytes at the rate the
    // SMs draw them from memory, which the model above does not count. cuBLAS runs 64-row
    // tiles of N there, M whole in one tile of the swapped problem or in two, K whole, and as
    // many stages as fit (the H100's profiler: 64x72 in 12 stages at 65x5120x5120, 64x24 in 16
    // at 40x2560x2592, 64x64 in 13 at 128x4096x4096; the H200's: 64x72 in 12 at 140x3072x3072,
    // where the same tiles here took 0.0138 ms against 0.0156 for the 64x128 the search had
    // picked, torch.mm 0.0135, bench/gemm_ab.py). The same tilings here, with 8 stages and with
    // the deepest ring (at most 16): on the H100 the deep ring took 65x5120x5120 from 0.0330
    // to 0.0316 ms and 128x4096x4096's 64x64 from 0.0256 to 0.0232, but 99x3128x3072's from
    // 0.0183 to 0.0201, so both are timed. M in two tiles only where their blocks fit one wave;
    // an M of 64-row tiles runs unswapped (128x4096x4096: 64x64 0.0234 ms, swapped 0.0261).
    // One batch only: no batched shape of few rows was measured.
    if (!compute_bound && g.M <= 256 && g.batch == 1) {
      auto add = [&](json c) {
        if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(std::move(c));
      };
      auto rings = [&](int bm, int bn, bool swap) {
        for (int stages : {8, wgmma_stages(bm, bn, 1, 16)}) {
          json c = {{"block_m", bm}, {"block_n", bn}, {"block_k", 64}, {"warps", 8}, {"stages", stages}, {"split_k", 1}, {"cluster_m", 1}, {"mma", "wgmma"}};
          if (swap) c["swap_ab"] = 1;
          add(std::move(c));
        }
      };
      rings(64, 64, false);
      if (g.M % 64 != 0 && wa && wb && wb->kmajor && !staged_store(w)) {  // 64-row multiples: 64x64 is the same tiling
        for (int64_t t : {1, 2}) {
          const int bn = int(((g.M + t - 1) / t + 7) / 8 * 8);
          if (t == 1 || tile_count(w, 64, bn) <= kSms) rings(64, bn, true);
        }
        // Where M whole in 64-row tiles of N takes more than a wave, the narrowest taller tiles
        // (128, 192 or 256 rows) that take one, in the deepest ring: 2x21504x7200 in 336 tiles of
        // 64x8 (2.5 waves) took 0.0910 ms with bias + gelu, in 112 of 192x8 0.0861 (H200,
        // bench/gemm_ab.py, fp16; cuBLASLt 0.0849).
        if (const int bn = int((g.M + 7) / 8 * 8); tile_count(w, 64, bn) > kSms) {
          for (auto [bm, warps] : {std::pair{128, 12}, std::pair{192, 16}, std::pair{256, 12}}) {
            const int consumers = warps / 4 - 1;
            if (tile_count(w, bm, bn) > kSms || wgmma_accumulators(bm, bn, consumers) > wgmma_accumulator_limit(consumers)) continue;
            add({{"block_m", bm}, {"block_n", bn}, {"block_k", 64}, {"warps", warps}, {"stages", wgmma_stages(bm, bn, consumers, 16)}, {"split_k", 1},
                 {"cluster_m", 1}, {"swap_ab", 1}, {"mma", "wgmma"}});
            break;
          }
        }
      }
    }
    // Too few tiles for the SMs: the 64x128 tiling with K split, as the default would, and half as much.
    const int split = small_problem_split_k(g, 64, 128);
    for (int s : {split, split / 2}) {
      if (s > 1) {
        out.push_back({{"block_m", 64}, {"block_n", 128}, {"block_k", 64}, {"warps", 8}, {"stages", 8}, {"split_k", s}, {"cluster_m", 1}, {"mma", "wgmma"}});
      }
    }
    // An operand TMA cannot take (a row of an odd length) is copied whole on every call before
    // the wgmma kernel reads it: where the problem is memory-bound that pass costs as much as the
    // gemm (1x5121x20480: 0.2483 ms against cuBLAS's 0.1209 on the H100, B's 210 MB read, written
    // and read again). The mma_sync kernel reads it in place (cp.async lands a misaligned row's
    // aligned blocks, shifted in shared memory), its tiles in K parts enough for about four
    // blocks an SM (at most 8 parts, 4 K tiles each at least). Tiles of 32 or 64 rows (M <= 64)
    // take 64 columns, 64 deep in 4 stages and 32 in 6, or 128 columns 64 deep in 3 (31x3073x
    // 12288: 32x64 0.0606 ms, 32x128 0.0674, cuBLAS 0.0852); 128-row ones (M > 64) 8 warps
    // (65x6145x21504: 128x128 0.2323 ms against 0.3144 with 4 warps and 0.3063 for wgmma on the
    // copy, cuBLAS 0.2695), 128 or 64 columns 64 deep, 128 columns 32 deep.
    if (!compute_bound && (ta->packed || tb->packed)) {
      const int bm = g.M <= 32 ? 32 : g.M <= 64 ? 64 : 128;
      using Tile = std::tuple<int, int, int, int>;  // block_n, block_k, stages, warps
      const std::vector<Tile> tiles = bm == 128 ? std::vector<Tile>{{128, 64, 3, 8}, {64, 64, 4, 8}, {128, 32, 4, 8}}
                                                : std::vector<Tile>{{64, 64, 4, 8}, {64, 32, 6, 4}, {128, 64, 3, 8}};
      for (auto [bn, bk, stages, warps] : tiles) {
        const int parts = split_to_fill(g, tile_count(g, bm, bn), 4 * kSms, 4 * kSms, bk);
        out.push_back({{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"warps", warps}, {"stages", stages}, {"split_k", parts}, {"mma", "mma_sync"}});
      }
      // A few rows of C (decode) with B's rows contiguous: gemv.cuh, one kernel on B in place.
      // At 1x1025x2752 both ways above take three kernels or two (B's copy, the gemm, K split's
      // sum: 17.4 us by CUDA events on the H200, bf16; the mma_sync kernel and the sum 17.7)
      // against cuBLAS's one gemv (11.3 us). 24, 56 and 120 columns a block of 8 warps, K in as
      // many parts (at most 8) as bring the blocks to about four an SM; narrow blocks won the
      // few columns, wide ones the many. 4 rows in flight a thread: more held too many registers
      // at M = 3 to 8 (H200, torch.profiler, us: 3x5121x17920 fp16 in 120 columns 63 with 4,
      // 74 with 2, 85 with 8; M = 5 and 8 and 1x5121x20480 also fastest with 4); a part of 8 passes
      // or fewer all at once (1x1025x2752 bf16 in 24 columns, 6 passes: 5.7 with 6, 6.2 with 4).
      if (g.M <= kGemvMaxM && g.batch == 1 && g.sBn == 1) {
        for (int bn : {24, 56, 120}) {
          const int64_t blocks = (g.N + bn - 1) / bn;
          const int parts = int(std::clamp<int64_t>((4 * kSms + blocks - 1) / blocks, 1, 8));
          // A part of 8 passes of the block's rows or fewer is loaded in one step, else 4 rows a thread at a time.
          const int64_t rows = 256 / (bn / 8 + 1), passes = ((g.K + parts - 1) / parts + rows - 1) / rows;
          out.push_back({{"block_m", 32}, {"block_n", bn}, {"block_k", 64}, {"warps", 8}, {"stages", passes <= 8 ? passes : 4}, {"split_k", parts},
                         {"mma", "gemv"}});
        }
      }
    }
    return out;
  }
  for (auto [bm, bn, bk, w, s] : std::vector<std::tuple<int, int, int, int, int>>{
           {128, 128, 32, 4, 3}, {128, 128, 32, 4, 4}, {128, 256, 32, 8, 3}, {256, 128, 32, 8, 3}, {128, 128, 64, 4, 3},
           {64, 128, 32, 4, 4}, {128, 64, 32, 4, 4}, {64, 64, 32, 4, 4}, {128, 256, 64, 8, 3}, {64, 256, 32, 4, 3}}) {
    out.push_back({{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"warps", w}, {"stages", s}, {"mma", "mma_sync"}});
  }
  return out;
}

void CudaGemm::complete_params(json& params) const {
  if (cuda_mma(params) == CudaMma::kMmaSync) return;
  const json& defaults = cuda_mma(params) == CudaMma::kGemv ? kGemvDefaults : kWgmmaDefaults;
  for (auto it = defaults.begin(); it != defaults.end(); ++it) {
    if (!params.contains(it.key())) params[it.key()] = it.value();
  }
}

void CudaGemm::choose_params(TemplateRequest& req, const GemmProblem& g) const {
  if (!wgmma_viable(req)) return;
  // Hopper's fast path by default, as the mma_sync defaults are for sm_80 and later. A
  // problem of fewer 128x256 tiles than half the 132 SMs of an H100 (small M, or small
  // M and N) takes 64x128 tiles with one consumer warpgroup and 8 stages instead, the tiling
  // that won the skinny shapes (docs/BENCHMARKS.md): four times the tiles to spread, and
  // K split where even those leave half the SMs idle. Problems whose 128x256 tiles fill
  // every SM run them in clusters of two that share B.
  req.spec.params = kWgmmaDefaults;
  const int64_t tiles = tile_count(g, 128, 256);
  if (tiles >= kSms) req.spec.params["cluster_m"] = 2;
  if (tiles < 66) {
    req.spec.params = {{"block_m", 64}, {"block_n", 128}, {"block_k", 64}, {"warps", 8}, {"stages", 8},
                       {"split_k", small_problem_split_k(g, 64, 128)}, {"cluster_m", 1}, {"mma", "wgmma"}};
  }
}

void CudaGemm::check(const TemplateRequest& r, const GemmProblem& g, Problems& p) const {
  const json& q = r.spec.params;
  if (cuda_mma(q) == CudaMma::kWgmma) return check_wgmma(r, g, p);
  if (cuda_mma(q) == CudaMma::kGemv) return check_gemv(r, g, p);
  if (q["split_k"] != 1 && g.ab == Dtype::kFloat32) p.add("/params/split_k", "split_k is the tensor-core kernels' (16-bit types); float32 takes 1");
  if (q.value("tail_split", 0) != 0) p.add("/params/tail_split", "tail_split is the wgmma kernel's (\"mma\": \"wgmma\" on sm_90a); mma_sync and float32 take 0");
  if (q["cluster_m"] != 1) p.add("/params/cluster_m", "cluster_m is the wgmma kernel's (\"mma\": \"wgmma\" on sm_90a); mma_sync and float32 take 1");
  if (q.value("cluster_n", 1) != 1) p.add("/params/cluster_n", "cluster_n is the wgmma kernel's (\"mma\": \"wgmma\" on sm_90a); mma_sync and float32 take 1");
  if (q.value("pingpong", 0) != 0) p.add("/params/pingpong", "pingpong is the wgmma kernel's (\"mma\": \"wgmma\" on sm_90a); mma_sync and float32 take 0");
  if (q.value("swap_ab", 0) != 0) p.add("/params/swap_ab", "swap_ab is the wgmma kernel's (\"mma\": \"wgmma\" on sm_90a); mma_sync and float32 take 0");
  int bm = q["block_m"], bn = q["block_n"], bk = q["block_k"], warps = q["warps"], stages = q["stages"];
  if (warps > 12) p.add("/params/warps", "16 warps are the wgmma kernel's (three consumer warpgroups); mma_sync and float32 take 1 to 12");
  if (bm == 192) p.add("/params/block_m", "192-row tiles are the wgmma kernel's (three consumer warpgroups); mma_sync and float32 take 32, 64, 128 or 256");
  if (g.ab == Dtype::kFloat32) {
    const int threads = warps * 32;
    const int per = bm * bn / threads;
    const int tn = per <= 16 ? 4 : 8;
    if (per < 4 || per > 64 || bm * bn % threads != 0 || bn % tn != 0 || (bn / tn) > threads || threads % (bn / tn) != 0 ||
        bm % (threads / (bn / tn)) != 0) {
      p.add("/params/warps", "float32 SIMT: block_m x block_n / (warps x 32) = " + std::to_string(per) + " outputs per thread; it must be 4 to 64 and tile the block");
    }
    if (bk > 32) p.add("/params/block_k", "float32 SIMT takes block_k up to 32");
    const int64_t smem = int64_t(bk) * (bm + 4 + bn + 4) * 4;
    if (smem > 48 * 1024) p.add("/params/block_k", "float32 SIMT tiles need " + std::to_string(smem) + " bytes of static shared memory; the limit is 49152");
    return;
  }
  for (size_t i = 0; i < r.archs.size(); ++i) {
    int sm = std::atoi(r.archs[i].c_str() + 3);
    if (sm < 80) p.add(arch_field(r, i), "the float16/bfloat16 gemm uses mma.sync and cp.async: sm_80 or newer, not " + r.archs[i]);
    const int64_t smem = int64_t(stages) * (int64_t(bm) * (bk + 8) + int64_t(bk) * (bn + 8)) * 2;
    if (smem > cuda_smem_limit(r.archs[i])) {
      p.add("/params/stages", std::to_string(stages) + " stages of " + std::to_string(bm) + "x" + std::to_string(bn) + "x" + std::to_string(bk) +
                                  " tiles need " + std::to_string(smem) + " bytes of shared memory; " + r.archs[i] + " has " + std::to_string(cuda_smem_limit(r.archs[i])));
    }
  }
  const int wm = warps >= 4 ? 2 : 1;
  const int wn = warps / wm;
  const int wtm = bm / wm, wtn = bn / wn;
  if (wtm % 16 != 0 || wtn % 16 != 0 || wtm < 16 || wtn < 16) {
    p.add("/params/warps", std::to_string(warps) + " warps split a " + std::to_string(bm) + "x" + std::to_string(bn) + " block into " + std::to_string(wtm) + "x" + std::to_string(wtn) + " warp tiles; each must be a multiple of 16x16");
  } else if ((wtm / 16) * (wtn / 8) * 4 > 128) {
    p.add("/params/warps", "a " + std::to_string(wtm) + "x" + std::to_string(wtn) + " warp tile holds " + std::to_string((wtm / 16) * (wtn / 8) * 4) + " accumulators per thread; the limit is 128 (registers)");
  }
  const int threads = warps * 32;
  if ((bm * bk / 8) % threads != 0 && bm * bk / 8 < threads) p.add("/params/block_k", "the A tile is too small for the block's threads to load");
  check_split_k(g, q["split_k"], bk, "block_k " + std::to_string(bk), p);
}

// Where no stride depends on M: 16-bit operands (the tensor-core kernels and their reference),
// one batch, M >= 2 (a size-1 dimension's stride says nothing), and M the outermost dimension
// of every tensor that has one (A with unit K stride, C with unit N stride, epilogue inputs
// that are not broadcast over M), so the request's strides hold for any M. The caller's
// tensors then have the request's strides and M rows.
bool CudaGemm::runtime_m(const TemplateRequest& req, const GemmProblem& p) const {
  if (swap_ab(req.spec.params)) return false;  // M is the swapped kernel's N, a compile-time constant
  if (cuda_mma(req.spec.params) == CudaMma::kGemv) return false;  // gemv holds C's M rows in registers
  if (p.ab != Dtype::kFloat16 && p.ab != Dtype::kBFloat16) return false;
  if (p.batch != 1 || p.M < 2 || p.sAk != 1 || p.sAm < p.K || p.sCn != 1 || p.sCm < p.N) return false;
  for (const auto& op : req.spec.epilogue) {
    if (op.input < 0) continue;
    const TensorMeta& t = req.spec.inputs[static_cast<size_t>(op.input)];
    if (t.rank() < 2 || t.sizes[t.rank() - 2] == 1) continue;  // broadcast over M
    const size_t m = t.rank() - 2, n = t.rank() - 1;
    if (t.sizes[n] > 1 && t.strides[m] < t.strides[n] * t.sizes[n]) return false;
  }
  return true;
}

std::string CudaGemm::gelu_function(bool tanh) const {
  static const KernelFile& gelu = kernel_file("gemm/gelu.cuh");
  return gelu.section(tanh ? "gelu_tanh" : "gelu_erf");
}

std::string CudaGemm::gelu_pair_function() const {
  static const KernelFile& gelu = kernel_file("gemm/gelu.cuh");
  return gelu.section("gelu_tanh2");
}

std::string CudaGemm::render(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig, const EpilogueCode& ep,
                             bool reference, uint64_t& workspace_bytes) const {
  if (reference) return render_reference_gpu(req, p, sig, ep, "cudaGetLastError() == cudaSuccess");
  static const KernelFile& simt = kernel_file("gemm/simt.cuh");
  static const KernelFile& mma_sync = kernel_file("gemm/mma_sync.cuh");
  const auto& q = req.spec.params;
  const bool wgmma = cuda_mma(q) == CudaMma::kWgmma;  // check() allows it for 16-bit types only
  // With swap_ab every kernel of the source (the mma_sync fallback too) runs the swapped
  // problem `w`: B^T as A, A^T as B, C^T as C, M taken from the constant its N is; its
  // epilogue reads (n, m) where it is called with (m, n).
  const bool swap = wgmma && swap_ab(q);
  const GemmProblem w = swap ? swapped_ab(p) : p;
  Subst s;
  set_problem(s, w);
  if (swap) s.set("SHAPE_CHECK", "  if (M != kN || N != kM || K != kK || batch != kBatch) return 2;  // compiled for one shape, A and B exchanged\n");
  s.set("bm", q["block_m"].get<int>()).set("bn", q["block_n"].get<int>()).set("bk", q["block_k"].get<int>());
  s.set("warps", q["warps"].get<int>()).set("stages", q["stages"].get<int>());
  s.set("A", sig.arg(swap ? 1 : 0)).set("B", sig.arg(swap ? 0 : 1)).set("C", sig.out_arg()).set("run_m", swap ? "kM" : "M");
  s.set("EPARGS", ep.args).set("EPPARAMS", ep.params);
  s.set("DECL", sig.declaration()).set("NULLCHECKS", sig.null_checks("  "));
  const Layouts l = layouts(w);
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  s.set("a_mmajor", b(l.a_mmajor)).set("b_kmajor", b(l.b_kmajor)).set("a_vec", b(l.a_vec)).set("b_vec", b(l.b_vec));
  s.set("a_kfast", b(w.sAk == 1)).set("b_kfast", b(w.sBk == 1 && w.sBn != 1));
  const std::string mma_type = p.ab == Dtype::kBFloat16 ? "bf16" : "f16";
  s.set("mma_type", mma_type);
  std::ostringstream src;
  src << prelude(req.backend) << (wgmma ? "#include <cuda.h>\n#include <type_traits>\n" : "") << "\nnamespace {\n" << problem_constants(s, w)
      << "using T = " << element_ctype(req.backend, p.ab) << ";\nusing TC = " << element_ctype(req.backend, p.out) << ";\n"
      << (swap ? ep.swapped : ep.function) << (wgmma ? (swap ? ep.pair_swapped : ep.pair) : "");
  if (p.ab == Dtype::kFloat32) {
    src << s.apply(simt.section("simt"));
  } else if (cuda_mma(q) == CudaMma::kGemv) {
    s.set("split_k", q["split_k"].get<int>()).set("rows", p.M);
    src << s.apply(kernel_file("gemm/gemv.cuh").section("gemv"));
  } else if (!wgmma) {
    const int split_k = k_splits(w, q["split_k"].get<int>(), q["block_k"].get<int>());
    workspace_bytes = partial_sums_bytes(w, split_k);
    s.set("mma_split_k", split_k);
    src << s.apply(mma_sync.section("kernel")) << s.apply(mma_sync.section("entry"));
  } else {
    // The mma_sync kernel, at a tiling valid on every sm_80+ part, serves misaligned views.
    Subst fallback = s;
    fallback.set("bm", 128).set("bn", 128).set("bk", 32).set("warps", 4).set("stages", 3).set("mma_split_k", 1);
    const auto ta = tma_operand(w, 0), tb = tma_operand(w, 1);  // present: check() required both
    const int warps = q["warps"].get<int>();
    const int split_k = k_splits(w, q["split_k"].get<int>()), tail_split = q.value("tail_split", 0);
    // wgmma.cuh's workspace_bytes(): the partial sums, then the packed operands' copies, at the request's M.
    workspace_bytes = partial_sums_bytes(w, split_k);
    if (tail_split > 0) workspace_bytes = uint64_t(kTailSlots) * q["block_m"].get<int>() * q["block_n"].get<int>() * 4;
    if (ta->packed || tb->packed) workspace_bytes = align256(workspace_bytes) + packed_bytes(*ta) + packed_bytes(*tb);
    s.set("split_k", split_k).set("tail_split", tail_split).set("cluster_m", q["cluster_m"].get<int>()).set("cluster_n", q.value("cluster_n", 1));
    s.set("consumers", warps / 4 - 1).set("pingpong", b(q.value("pingpong", 0) != 0)).set("a_kmajor", b(ta->kmajor)).set("b_kmajor", b(tb->kmajor));
    s.set("a_batched", b(ta->batch > 1)).set("b_batched", b(tb->batch > 1));
    for (auto [prefix, t] : {std::pair{"a_", *ta}, std::pair{"b_", *tb}}) {
      s.set(std::string(prefix) + "inner", t.inner).set(std::string(prefix) + "outer", t.outer).set(std::string(prefix) + "batch", t.batch);
      s.set(std::string(prefix) + "outer_stride", t.outer_stride).set(std::string(prefix) + "batch_stride", t.batch_stride);
      s.set(std::string(prefix) + "packed", b(t.packed)).set(std::string(prefix) + "src_outer_stride", t.src_outer_stride);
      s.set(std::string(prefix) + "src_batch_stride", t.src_batch_stride);
    }
    if (w.any_m) {  // A is K-major (runtime_m() asks for it): M rows of K, one batch whose stride M makes
      s.set("a_outer", "M").set("a_batch_stride", "(uint64_t(M) * " + std::to_string(ta->outer_stride) + " + 7) / 8 * 8");
    }
    s.set("wgmma_fn", wgmma_function(q["block_n"].get<int>(), mma_type, ta->kmajor, tb->kmajor));
    src << fallback.apply(mma_sync.section("kernel")) << s.apply(kernel_file("gemm/wgmma.cuh").section("wgmma"));
  }
  return src.str();
}

}  // namespace

// Of 2 to kTailMaxParts parts (at most the K slices, and the kTailSlots workspace slots), the count whose
// parts finish soonest (ceil(tail parts / resident) waves of 1 / parts of a tile), the
// smallest of equals; 1 where none beats the whole tiles' one wave.
int64_t cuda_tail_parts(int64_t tail, int64_t resident, int64_t ktiles) {
  int64_t best = 1;
  for (int64_t p = 2; p <= kTailMaxParts && p <= ktiles && tail * p <= kTailSlots; ++p)
    if ((tail * p + resident - 1) / resident * best < (tail * best + resident - 1) / resident * p) best = p;
  return best;
}

const GemmBackend& gemm_cuda_backend() {
  static const CudaGemm backend;
  return backend;
}

}  // namespace kforge::core::templates
