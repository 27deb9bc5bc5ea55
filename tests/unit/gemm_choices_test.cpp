// The Hopper gemm's default search (the cuda backend's default_choices, gemm_cuda.cpp, on
// sm_90a): wgmma tilings only, pruned by the cost model where the problem is compute-bound,
// split-K and clusters over a few rows of tiles added where the tiles leave SMs idle; operands
// whose strides TMA cannot take copied into the workspace. And which gelu each rendering uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "core/templates/gemm_backend.hpp"
#include "core/templates/template.hpp"

namespace kforge::core::templates {
namespace {

TensorMeta matrix(const std::string& name, int64_t batch, int64_t rows, int64_t cols) {
  TensorMeta t;
  t.name = name;
  t.dtype = Dtype::kFloat16;
  if (batch > 1) {
    t.sizes = {batch, rows, cols};
    t.strides = {rows * cols, cols, 1};
  } else {
    t.sizes = {rows, cols};
    t.strides = {cols, 1};
  }
  return t;
}

// A sm_90a gemm of C[batch, M, N] = A[batch, M, K] B[batch, K, N], every tensor contiguous.
TemplateRequest hopper_request(int64_t batch, int64_t M, int64_t N, int64_t K) {
  TemplateRequest r;
  r.backend = Backend::kCuda;
  r.archs = {"sm_90a"};
  r.spec.name = "gemm";
  r.spec.inputs = {matrix("A", batch, M, K), matrix("B", batch, K, N)};
  r.spec.output = matrix("C", batch, M, N);
  return r;
}

// "bm x bn / split", "c2" for a cluster of two (along M; "n2": along N), "T" for swap_ab (C^T = B^T A^T: bn tiles M) and "p" for pingpong, for
// each choice; an mma_sync one (only where an operand is copied) as "ms bm x bn x bk / split", a gemv one as "gv bn / split s<stages>".
std::multiset<std::string> hopper_choices(int64_t batch, int64_t M, int64_t N, int64_t K) {
  const TemplateRequest r = hopper_request(batch, M, N, K);
  std::multiset<std::string> out;
  for (const auto& c : Registry::builtin().find("gemm")->default_choices(r)) {
    if (c.value("mma", "") == "gemv") {
      out.insert("gv " + std::to_string(c["block_n"].get<int>()) + "/" + std::to_string(c["split_k"].get<int>()) + " s" +
                 std::to_string(c["stages"].get<int>()));
      continue;
    }
    if (c.value("mma", "") == "mma_sync") {
      out.insert("ms " + std::to_string(c["block_m"].get<int>()) + "x" + std::to_string(c["block_n"].get<int>()) + "x" +
                 std::to_string(c["block_k"].get<int>()) + "/" + std::to_string(c["split_k"].get<int>()));
      continue;
    }
    EXPECT_EQ(c.value("mma", ""), "wgmma") << c.dump();
    out.insert(std::to_string(c["block_m"].get<int>()) + "x" + std::to_string(c["block_n"].get<int>()) + "/" +
               std::to_string(c.value("split_k", 1)) + (c.value("cluster_m", 1) > 1 ? "c" + std::to_string(c["cluster_m"].get<int>()) : "") +
               (c.value("cluster_n", 1) > 1 ? "n" + std::to_string(c["cluster_n"].get<int>()) : "") +
               (c.value("tail_split", 0) > 0 ? "t" : "") + (c.value("swap_ab", 0) ? "T" : "") + (c.value("pingpong", 0) ? "p" : ""));
  }
  return out;
}

// Fewer tiles than SMs: the tilings whose K split fills the SMs the model puts clearly ahead
// are tried split too, at most three; a tiling whose tiles fill two thirds of the SMs is not
// split, nor are compute-bound problems.
TEST(GemmChoices, FewerTilesThanSmsTrySplittingKToFillThem) {
  // 257x4096x4096: 44 tiles of 192x192 (3 ways: 132 units), 66 of 128x192 and 64 of 192x128
  // (2 ways); 48 of 128x256 (2 ways) are 1.3x the best; 96 of 128x128 and 80 of 64x256 fill two
  // thirds of the SMs.
  const auto ragged = hopper_choices(1, 257, 4096, 4096);
  for (const char* c : {"192x192/3", "128x192/2", "192x128/2"}) EXPECT_EQ(ragged.count(c), 1u) << c << ::testing::PrintToString(ragged);
  EXPECT_EQ(ragged.count("128x256/2"), 0u) << ::testing::PrintToString(ragged);
  // The rows of tiles as one cluster that reads B once (with K split to fill the SMs): 66
  // blocks of 128x192 (2 ways), 48 of 128x256 (2 ways), 192x192's two rows in pairs (3 ways).
  for (const char* c : {"128x192/2c3", "128x256/2c3", "192x192/3c2"}) EXPECT_EQ(ragged.count(c), 1u) << c << ::testing::PrintToString(ragged);
  EXPECT_EQ(ragged.count("128x128/2") + ragged.count("64x256/2"), 0u) << ::testing::PrintToString(ragged);
  // Swapped, 257 rows in two tiles of 136 or four of 72 (the H100's two best, 0.0280 and 0.0302
  // ms); 192-row tiles of N only where the tiles fill the SMs, which these do not.
  for (const char* c : {"64x136/1T", "128x72/1T"}) EXPECT_EQ(ragged.count(c), 1u) << c << ::testing::PrintToString(ragged);
  for (const std::string& c : ragged) EXPECT_FALSE(c.starts_with("192x") && c.ends_with("T")) << c;
  // 3072^3: 256 tiles of 192x192 are two waves (0.0795 ms on the H100, 1.01x cuBLAS, whose
  // own kernel there is 192x192); 128x192's 384 (2.9 waves: 0.0816 ms) and 192x128's are
  // within 5 %; 128x256's and 256x128's 288 (two waves and 24, cut into 5 parts) 1.07x;
  // 128x128's 576 (four waves and 48, in 2 parts) 1.18x, not tried.
  EXPECT_EQ(hopper_choices(1, 3072, 3072, 3072),
            (std::multiset<std::string>{"192x192/1", "128x192/1", "192x128/1", "128x256/1t", "256x128/1t"}));
  for (const std::string& c : hopper_choices(1, 2048, 11008, 4096)) EXPECT_TRUE(c.find("/1") != std::string::npos) << c;
  // No choice takes stream-K (it lost every issue-42 case on the H100).
  for (const std::string& c : ragged) EXPECT_EQ(c.find('s'), std::string::npos) << c;
}

TEST(GemmChoices, ComputeBoundProblemsSkipTheTilingsTheCostModelPutsFarBehind) {
  // 4096^3: 512 tiles of 128x256 (4 waves on 132 SMs), also tried in clusters of two; 128x128
  // with two consumers is 1.11x the best; 64x256 and 128x128 with one consumer 1.18x, and
  // 64x128 and 128x64 tiles (16 waves of a quarter of the work at 0.7) 1.43x: not tried.
  // 128x192's 704 tiles (5 waves and a third) are 1.18x whole, 1.13x with the 44 past the
  // fifth wave cut into 3 parts. No pingpong: no epilogue, and K long.
  EXPECT_EQ(hopper_choices(1, 4096, 4096, 4096), (std::multiset<std::string>{"128x256/1", "128x256/1", "256x128/1", "128x128/1",
                                                                              "128x256/1c2", "128x256/1c2", "128x192/1t"}));
}

TEST(GemmChoices, APartialLastWaveTriesItsTilesCutIntoPartsOfK) {
  // 4647x2048x7168: 296 tiles of 128x256 are two waves of 132 and 32 (cut into 4 parts: one
  // wave of 128 quarter tiles), 304 of 256x128 two and 40 (3 parts): the model's two best.
  const auto tailed = hopper_choices(1, 4647, 2048, 7168);
  EXPECT_EQ(tailed.count("128x256/1t") + tailed.count("256x128/1t"), 2u) << ::testing::PrintToString(tailed);
  // 513x6848x2560: 135 tiles of 128x256 (a wave and 3), cut or not, are 1.2x the 108 tiles
  // of 192x192 (three rows: one wave), which the H100 ran at 0.98x cuBLAS against 0.78x for
  // 128x256 with the 3 cut in 8 parts. Swapped, 192 rows of N by 176 of M (513 rows in 3
  // tiles), 80 (in 7) or 88 (in 6), 256 by 136 (in 4), and 128 by 136 (in 4: 216 tiles, the
  // fewest waves of 128-row tiles): a ragged M's swapped tilings within the pruning margin.
  EXPECT_EQ(hopper_choices(1, 513, 6848, 2560),
            (std::multiset<std::string>{"192x192/1", "192x176/1T", "192x80/1T", "192x88/1T", "256x136/1T", "128x136/1T"}));
  // 4800x2048x7168: 304 tiles of 256x128 are two waves and 40, cut in 3 parts.
  EXPECT_EQ(hopper_choices(1, 4800, 2048, 7168).count("256x128/1t"), 1u) << ::testing::PrintToString(hopper_choices(1, 4800, 2048, 7168));
  // A tail no cut shortens (4096^3: 116 tiles past three waves of 128x256 or 256x128) and a
  // problem with fewer tiles than SMs (split_k's) get none.
  const auto square = hopper_choices(1, 4096, 4096, 4096);
  EXPECT_EQ(square.count("128x256/1t") + square.count("256x128/1t"), 0u) << ::testing::PrintToString(square);
  for (const std::string& c : hopper_choices(1, 257, 4096, 4096)) EXPECT_EQ(c.find('t'), std::string::npos) << c;
  // The kernel counts the parts at launch as the model does.
  EXPECT_EQ(cuda_tail_parts(32, 132, 112), 4);   // 128 parts: one wave
  EXPECT_EQ(cuda_tail_parts(11, 132, 112), 8);   // at most 8
  EXPECT_EQ(cuda_tail_parts(116, 132, 64), 1);   // 232 parts or more take as long as the 116 tiles
  EXPECT_EQ(cuda_tail_parts(67, 132, 64), 3);    // 201 parts in two waves of a third: 0.67 of a tile
  EXPECT_EQ(cuda_tail_parts(33, 132, 2), 2);     // no more parts than K slices
  EXPECT_EQ(cuda_tail_parts(120, 132, 64), 1);   // 2 x 120 parts would pass the 320 slots
}

TEST(GemmChoices, SmallProblemsTryEveryTilingAndSplitK) {
  // 128x4096x4096: 16 tiles of 128x256, memory-bound, where 128x64 won on the H100; 64 tiles
  // of 64x128 fill half the SMs, so K is split 2 ways (and not 1 = half of that). Every
  // tiling without clusters (10, 64x64 and 128x192 included), three more with K split to fill
  // the SMs, three with the two 64-row tiles of a column in a cluster, and 64x64 with the
  // deepest ring (13 stages).
  const auto small = hopper_choices(1, 128, 4096, 4096);
  EXPECT_EQ(small.size(), 18u) << ::testing::PrintToString(small);
  EXPECT_EQ(std::count_if(small.begin(), small.end(), [](const std::string& c) { return c.ends_with("c2"); }), 3);
  EXPECT_EQ(small.count("64x128/2"), 1u);
  EXPECT_EQ(small.count("128x64/1"), 1u);
  EXPECT_EQ(small.count("64x64/1"), 2u);  // 8 and 13 stages
  // M = 1: 32 tiles of 64x128, split 4 ways (128 units), and 2; of the tilings, only those of
  // 64 rows (a taller tile would compute zeros), whole and with K split to fill the SMs (16
  // tiles of 64x256 8 ways, 64 of 64x64 2 ways); and swapped, M in one 8-row tile of 128 or
  // 64 rows of N (32 tiles split 4 ways, 64 split 2 ways, and 64 whole: the few-rows tilings,
  // with 64x64 unswapped; each of these in 8 stages and in the deepest ring).
  const auto gemv = hopper_choices(1, 1, 4096, 4096);
  EXPECT_EQ(gemv, (std::multiset<std::string>{"64x256/1", "64x128/1", "64x64/1", "64x128/4", "64x128/2", "64x256/8", "64x64/2", "128x8/4T",
                                              "64x8/2T", "64x64/1", "64x8/1T", "64x8/1T"}));
  // M = 64 is still one 64-row tile; M = 65 is not.
  for (const std::string& c : hopper_choices(1, 64, 4096, 4096)) EXPECT_TRUE(c.rfind("64x", 0) == 0 || c.ends_with("T")) << c;
  EXPECT_EQ(hopper_choices(1, 65, 4096, 4096).count("128x128/1"), 2u);
  // One row of tiles has nothing to share in a cluster.
  for (const std::string& c : gemv) EXPECT_EQ(c.find('c'), std::string::npos) << c;
  // Batched attention scores: 32 x 8 x 8 = 2048 tiles of 256, compute-bound by the model.
  EXPECT_EQ(hopper_choices(32, 2048, 2048, 128).count("64x128/1"), 0u);
}

// An operand whose strides TMA cannot take (a row of an odd length: K = 6849) is copied into
// the workspace, rows padded to 8 elements, and the wgmma kernel maps the copy: such shapes
// get the wgmma search, not the mma_sync kernel (0.11x cuBLAS at 65x2560x6849 on the H100).
// The workspace is the copy's bytes (rows padded to 64 elements), 256-byte aligned, after the partial sums (batched here:
// with one batch the copy's size follows M, which the kernel then takes at run time, and the
// workspace query says it); an operand with no unit stride is still refused.
TEST(GemmChoices, OperandsTmaCannotTakeArePackedIntoTheWorkspace) {
  TemplateRequest r = hopper_request(2, 65, 2560, 6849);
  const Template* gemm = Registry::builtin().find("gemm");
  // Memory-bound with a copied operand: the mma_sync kernel, which reads it in place, is tried
  // too, K split for about four blocks an SM (80 blocks of 128x64: 6 parts; 40 of 128x128: 8, the
  // most): 128-row tiles 128 columns wide (64 and 32 deep) and 64 (64 deep).
  const auto choices = hopper_choices(2, 65, 2560, 6849);
  for (const char* c : {"ms 128x128x64/8", "ms 128x64x64/6", "ms 128x128x32/8"}) EXPECT_EQ(choices.count(c), 1u) << c << ::testing::PrintToString(choices);
  // 1x5121x20480 (N odd: B's 210 MB copied every call): 32-row tiles 64 columns wide (64 and 32
  // deep) and 128 (64 deep), 81 (6 parts) or 41 of them (8).
  const auto gemv = hopper_choices(1, 1, 5121, 20480);
  for (const char* c : {"ms 32x64x64/6", "ms 32x64x32/6", "ms 32x128x64/8"}) EXPECT_EQ(gemv.count(c), 1u) << c << ::testing::PrintToString(gemv);
  // And gemv (M <= 8, B's rows contiguous): 24, 56 and 120 columns a block, K in as many parts
  // as bring the blocks to about four an SM (214 blocks of 24: 3 parts; 92 of 56: 6; 43 of 120:
  // 8, the most), 4 rows in flight a thread; 1x1025x2752 in 43, 19 or 9 blocks, 8 parts each, and
  // a part of 24 columns is 6 passes of the block's 64 rows: all 6 loaded at once. None where M > 8.
  for (const char* c : {"gv 24/3 s4", "gv 56/6 s4", "gv 120/8 s4"}) EXPECT_EQ(gemv.count(c), 1u) << c << ::testing::PrintToString(gemv);
  const auto small = hopper_choices(1, 1, 1025, 2752);
  for (const char* c : {"gv 24/8 s6", "gv 56/8 s4", "gv 120/8 s4"}) EXPECT_EQ(small.count(c), 1u) << c << ::testing::PrintToString(small);
  for (const std::string& c : choices) EXPECT_FALSE(c.starts_with("gv")) << c;
  // 64 rows of 32768 columns: 512 blocks of 64x64 need no split (4 an SM); 256 of 64x128, 2.
  const auto wide = hopper_choices(1, 64, 32769, 4096);
  for (const char* c : {"ms 64x64x64/1", "ms 64x64x32/1", "ms 64x128x64/2"}) EXPECT_EQ(wide.count(c), 1u) << c << ::testing::PrintToString(wide);
  // Aligned operands, or a compute-bound problem, get none.
  for (auto [m, n, k] : {std::tuple{65, 2560, 6848}, std::tuple{4096, 4097, 4096}}) {
    for (const std::string& c : hopper_choices(1, m, n, k)) EXPECT_FALSE(c.starts_with("ms") || c.starts_with("gv")) << m << "x" << n << "x" << k << " " << c;
  }
  r.spec.params = {{"block_m", 64}, {"block_n", 128}, {"block_k", 64}, {"warps", 8}, {"stages", 8}, {"split_k", 1}, {"mma", "wgmma"}};
  ASSERT_TRUE(gemm->check(r));
  const auto k = gemm->render(r, false);
  ASSERT_TRUE(k) << k.error().message;
  EXPECT_NE(k->source.find("constexpr bool A_PACKED = true, B_PACKED = false;"), std::string::npos);
  ASSERT_TRUE(k->abi.workspace_bytes);
  EXPECT_EQ(*k->abi.workspace_bytes, 2u * 65 * 6912 * 2);  // rows of 6849 padded to 6912 (128 bytes)
  // Split two ways: the partial sums first (65 x 2560 floats each), then the copy.
  r.spec.params["split_k"] = 2;
  const auto split = gemm->render(r, false);
  ASSERT_TRUE(split);
  EXPECT_EQ(*split->abi.workspace_bytes, (2u * 2 * 65 * 2560 * 4 + 255) / 256 * 256 + 2u * 65 * 6912 * 2);
  // B with N odd (4097): B and C rows are odd; B is copied, C stored without TMA.
  r.spec.inputs[1] = matrix("B", 2, 6849, 4097);
  r.spec.output = matrix("C", 2, 65, 4097);
  r.spec.params["split_k"] = 1;
  const auto both = gemm->render(r, false);
  ASSERT_TRUE(both);
  EXPECT_NE(both->source.find("constexpr bool A_PACKED = true, B_PACKED = true;"), std::string::npos);
  // No unit stride at all: refused, naming the operand.
  r.spec.inputs[1].strides = {6849 * 4097 * 2, 2 * 4097, 2};
  const auto refused = gemm->check(r);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("B cannot be loaded by TMA"), std::string::npos) << refused.error().message;
}

// B's rows off 128 bytes (N = 2600 or 2792) cost its TMA rows two L2 requests each: the search
// adds clusters of two, which read B once for both blocks (0.74x and 0.86x cuBLAS on the H100
// before, 0.96x and 0.93x with them), and the model puts tiles that ask for more than 512
// requests a K slice behind. A small problem with A's or B's rows off tries 128x128 and 128x64
// in clusters that multicast the off operand (2x2, 1x2 or 2x1), where they all run at once.
TEST(GemmChoices, RowsOff128BytesTryClustersThatReadTheOperandOnce) {
  // 110 tiles of 128x256 (10 rows), 98 of 192x192: fewer than the SMs, more than half.
  const auto single_wave = hopper_choices(1, 1212, 2600, 6888);
  EXPECT_EQ(single_wave.count("128x256/1c2"), 2u) << ::testing::PrintToString(single_wave);
  EXPECT_EQ(single_wave.count("192x192/1c2"), 1u) << ::testing::PrintToString(single_wave);
  // Compute-bound, A and B off: 128x256 alone (1.5x the requests) is pruned, in pairs it is not.
  const auto short_k = hopper_choices(1, 6401, 2792, 1040);
  // 561 tiles of 128x256 or 510 of 192x192 (the H100's best there, 0.0687 ms in pairs); 128x128's
  // 1122 ask for 512. Swapped (6401 rows: ragged), 51 tiles of 128 rows of M, 48 of 136, 101 of
  // 64, and 41 of 160 (the fewest waves of 128-row tiles: 902 tiles). K = 1040 is short: the
  // swapped 128-row tilings with pingpong as well, and 128x128 with it in pairs; and 256x136
  // swapped (below).
  EXPECT_EQ(short_k, (std::multiset<std::string>{"128x256/1c2", "128x256/1c2", "192x192/1c2", "128x128/1", "128x128/1T", "128x136/1T",
                                                 "192x64/1T", "128x160/1T", "128x128/1Tp", "128x136/1Tp", "128x160/1Tp", "128x128/1c2p",
                                                 "256x136/1T"}));
  // Compute-bound, M ragged: the swapped 256-row tiling in the fewest waves, in pairs where
  // pairing adds no wave (cuBLAS's 256x160 in 2x1 at 2315x10776x3104: N in 43 rows of tiles, 44
  // paired, M in 15 tiles, 5 waves either way; 0.90x cuBLAS before, 0.93-0.96x with it on the
  // H200); alone where half a tile's rows are not whole 8-row atoms (6401x2792x1040's 256x136:
  // 11 rows of tiles, 48 of M, 4 waves; 3521x21536x7176's 256x168). Not with aligned rows.
  EXPECT_EQ(hopper_choices(1, 2315, 10776, 3104).count("256x160/1c2T"), 1u) << ::testing::PrintToString(hopper_choices(1, 2315, 10776, 3104));
  EXPECT_EQ(hopper_choices(1, 3521, 21536, 7176).count("256x168/1T"), 1u) << ::testing::PrintToString(hopper_choices(1, 3521, 21536, 7176));
  EXPECT_EQ(hopper_choices(1, 2315, 10752, 3072).count("256x160/1c2T"), 0u) << ::testing::PrintToString(hopper_choices(1, 2315, 10752, 3072));
  // Aligned rows of B: no cluster where the tiles do not fill the SMs, and 192x192 not in pairs.
  for (auto [m, n, k] : {std::tuple{1212, 2624, 6888}, std::tuple{1216, 2560, 6912}}) {
    for (const std::string& c : hopper_choices(1, m, n, k)) EXPECT_EQ(c.find("c2"), std::string::npos) << m << "x" << n << "x" << k << " " << c;
  }
  for (const std::string& c : hopper_choices(1, 3072, 3072, 3072)) EXPECT_EQ(c.find("c2"), std::string::npos) << c;
  // A small problem with A's and B's rows off (1000^3: 2000-byte rows): 128x128 in 2x2 (16
  // clusters of four), 128x64 in 1x2 (its 2x2 would be 32 clusters, more than the 30 that run at
  // once; 64 pairs do). Only A off (K = 1000, N = 1024): pairs along N. Aligned (1024^3): none.
  const auto both_off = hopper_choices(1, 1000, 1000, 1000);
  EXPECT_EQ(both_off.count("128x128/1c2n2"), 1u) << ::testing::PrintToString(both_off);
  EXPECT_EQ(both_off.count("128x64/1n2"), 1u) << ::testing::PrintToString(both_off);
  const auto a_off = hopper_choices(1, 1000, 1024, 1000);
  EXPECT_EQ(a_off.count("128x128/1n2"), 1u) << ::testing::PrintToString(a_off);
  EXPECT_EQ(a_off.count("128x64/1n2"), 1u) << ::testing::PrintToString(a_off);
  // Swapped as well, where C^T's rows are the problem's columns: 1000^3 in 128x72 (M in 14
  // tiles of 72; 64 would make 32 clusters of four) in 2x2, cuBLAS's tiles; with only A off
  // (the swapped problem's B: A^T), pairs along its M, in M's narrowest tiles of 64.
  EXPECT_EQ(both_off.count("128x72/1c2n2T"), 1u) << ::testing::PrintToString(both_off);
  EXPECT_EQ(a_off.count("128x64/1c2T"), 1u) << ::testing::PrintToString(a_off);
  for (const std::string& c : hopper_choices(1, 1024, 1024, 1024)) EXPECT_EQ(c.find('n'), std::string::npos) << c;
  // Too many clusters to run at once (1212x2600x6888, B off: 105 pairs of 128x128): none.
  EXPECT_EQ(single_wave.count("128x128/1c2"), 0u);
  EXPECT_EQ(single_wave.count("128x64/1c2"), 0u);
}

// swap_ab (C^T = B^T A^T) tiles M along wgmma's N in steps of 8: 258 rows in two tiles of 136,
// not three of 128 (the last one all but idle: 0.67x cuBLAS at 258x28672x7200 on the H100).
// The search adds it where the model puts it ahead of every unswapped tiling (a ragged M, a
// decode M) and nowhere M already fits its tiles.
TEST(GemmChoices, ARaggedOrSmallMTriesTheSwappedProblem) {
  const auto ragged = hopper_choices(1, 258, 28672, 7200);
  EXPECT_EQ(ragged.count("128x136/1T"), 1u) << ::testing::PrintToString(ragged);
  EXPECT_EQ(hopper_choices(1, 514, 24576, 8224).count("192x176/1T"), 1u);  // 514 rows in three tiles of 176, N in 192s
  for (const auto& [m, n, k] : {std::tuple{128, 4096, 4096}, std::tuple{4096, 4096, 4096}, std::tuple{2048, 6144, 4096}}) {
    for (const std::string& c : hopper_choices(1, m, n, k)) EXPECT_FALSE(c.ends_with("T")) << m << "x" << n << "x" << k << ": " << c;
  }
  // The rendering runs the swapped problem (M and N, A and B exchanged, C's strides too) for
  // the request's M alone; its epilogue takes (n, m) where the kernel passes its own (m, n).
  TemplateRequest r = hopper_request(1, 258, 1000, 520);
  TensorMeta bias;
  bias.name = "bias", bias.dtype = Dtype::kFloat16, bias.sizes = {1000}, bias.strides = {1};
  r.spec.inputs.push_back(bias);
  EpilogueOp add;
  add.op = "add", add.input = 2;
  r.spec.epilogue = {add};
  r.spec.params = {{"block_m", 128}, {"block_n", 136}, {"block_k", 64}, {"warps", 12}, {"stages", 6}, {"split_k", 1}, {"swap_ab", 1}, {"mma", "wgmma"}};
  const Template* gemm = Registry::builtin().find("gemm");
  ASSERT_TRUE(gemm->check(r));
  const auto k = gemm->render(r, false);
  ASSERT_TRUE(k) << k.error().message;
  const std::string& src = k->source;
  EXPECT_NE(src.find("constexpr int64_t kM = 1000, kN = 258, kK = 520"), std::string::npos);
  EXPECT_NE(src.find("sCm = 1, sCn = 1000, offC = 0;"), std::string::npos);
  EXPECT_NE(src.find("float kf_epilogue(float v, int64_t b, int64_t n, int64_t m"), std::string::npos);
  EXPECT_NE(src.find("wgmma.mma_async.sync.aligned.m64n136k16"), std::string::npos);
  EXPECT_NE(src.find("if (M != kN || N != kM"), std::string::npos);
  EXPECT_NE(src.find("constexpr bool A_KMAJOR = false, B_KMAJOR = true;"), std::string::npos);
  const nlohmann::json abi = k->abi.to_json();
  // M is fixed: the ABI's M has the request's value, and no tensor takes its rows from it.
  const auto m = std::find_if(abi["args"].begin(), abi["args"].end(), [](const nlohmann::json& a) { return a.value("name", "") == "M"; });
  ASSERT_NE(m, abi["args"].end()) << abi.dump();
  EXPECT_EQ(m->value("value", int64_t(-1)), 258) << abi.dump();
  EXPECT_EQ(abi.dump().find("\"size_args\":[\"M\""), std::string::npos) << abi.dump();
  // Refused: 136 columns unswapped; swapped with A M-major (B^T's K-major operand is A); and
  // swap_ab on the mma_sync kernel.
  auto refusal = [&](TemplateRequest q) {
    const auto c = gemm->check(q);
    return c ? std::string() : c.error().fields.at(0).field + ": " + c.error().message;
  };
  TemplateRequest plain = r;
  plain.spec.params["swap_ab"] = 0;
  EXPECT_NE(refusal(plain).find("/params/block_n"), std::string::npos) << refusal(plain);
  TemplateRequest mmajor = r;
  mmajor.spec.inputs[0].strides = {1, 258};
  EXPECT_NE(refusal(mmajor).find("needs A with unit K stride"), std::string::npos) << refusal(mmajor);
  mmajor.spec.params["block_n"] = 128;
  EXPECT_EQ(refusal(mmajor), "");
  TemplateRequest sync = r;
  sync.spec.params = {{"mma", "mma_sync"}, {"swap_ab", 1}};
  EXPECT_NE(refusal(sync).find("/params/swap_ab"), std::string::npos) << refusal(sync);
}

// Swapped tilings that fit a wave: two consumers' 256-row tiles of N (cuBLAS's 256x152 at
// 1204x8192x2048: M in 8 tiles, 256 tiles, two waves), M in more than 8 tiles of 64 rows or
// more where it is ragged (3163x1024x1024: 16 of 200, one wave), and a ragged M's within the
// pruning margin of the best unswapped tiling.
TEST(GemmChoices, SwappedTilingsFitTheWaves) {
  const auto two_waves = hopper_choices(1, 1204, 8192, 2048);
  for (const char* c : {"256x152/1T", "128x208/1T"}) EXPECT_EQ(two_waves.count(c), 1u) << c << ::testing::PrintToString(two_waves);
  // 844x6904x2560: 128x216 (216 tiles, two waves; 1.03x cuBLAS on the H100), which the model
  // ranks behind 128x192 unswapped (0.84x) and three other swapped tilings.
  EXPECT_EQ(hopper_choices(1, 844, 6904, 2560).count("128x216/1T"), 1u) << ::testing::PrintToString(hopper_choices(1, 844, 6904, 2560));
  // Not where the problem is not compute-bound: 65x4096x4096 gets no 128x24 (96 tiles of M's 24s).
  EXPECT_EQ(hopper_choices(1, 65, 4096, 4096).count("128x24/1T"), 0u);
  EXPECT_EQ(hopper_choices(1, 3163, 1024, 1024).count("128x200/1T"), 1u) << ::testing::PrintToString(hopper_choices(1, 3163, 1024, 1024));
  // Taller tiles of N where 128x256 tiles fill half the SMs though not all: 283x9216x3072 (108
  // of them) in 192x144 and 256x96, one wave each; not 257x4096x4096 (48).
  const auto half = hopper_choices(1, 283, 9216, 3072);
  for (const char* c : {"192x144/1T", "256x96/1T", "128x96/1T"}) EXPECT_EQ(half.count(c), 1u) << c << ::testing::PrintToString(half);
  for (const std::string& c : hopper_choices(1, 257, 4096, 4096)) EXPECT_FALSE(c.ends_with("T") && (c.starts_with("192x") || c.starts_with("256x"))) << c;
  // At most one 256-row tiling, beside the three best of the others: 258x28672x7200 keeps 128x136.
  const auto ragged = hopper_choices(1, 258, 28672, 7200);
  EXPECT_EQ(ragged.count("128x136/1T"), 1u) << ::testing::PrintToString(ragged);
  EXPECT_EQ(std::count_if(ragged.begin(), ragged.end(), [](const std::string& c) { return c.starts_with("256x") && c.ends_with("T"); }), 1);
  // An M of 64-row tiles gets no more than 8 tiles of it: 3072^3 and 2048x6144x4096 none at all.
  for (const auto& [m, n, k] : {std::tuple{3072, 3072, 3072}, std::tuple{2048, 6144, 4096}}) {
    for (const std::string& c : hopper_choices(1, m, n, k)) EXPECT_FALSE(c.ends_with("T")) << m << "x" << n << "x" << k << ": " << c;
  }
  // The accumulators a thread holds: two consumers' 256x176 (176, past the launch's 168
  // registers a thread: setmaxnreg's 232) are taken, 256x184 refused; three consumers stop at 96.
  const Template* gemm = Registry::builtin().find("gemm");
  TemplateRequest r = hopper_request(1, 1204, 8192, 2048);
  r.spec.params = {{"block_m", 256}, {"block_n", 176}, {"block_k", 64}, {"warps", 12}, {"stages", 3}, {"split_k", 1}, {"swap_ab", 1}, {"mma", "wgmma"}};
  EXPECT_TRUE(gemm->check(r));
  r.spec.params["block_n"] = 184;
  const auto wide = gemm->check(r);
  ASSERT_FALSE(wide);
  EXPECT_NE(wide.error().message.find("184 accumulators per thread; the limit is 176"), std::string::npos) << wide.error().message;
  r.spec.params = {{"block_m", 192}, {"block_n", 200}, {"block_k", 64}, {"warps", 16}, {"stages", 3}, {"split_k", 1}, {"swap_ab", 1}, {"mma", "wgmma"}};
  EXPECT_FALSE(gemm->check(r));
}

// pingpong: two consumer warpgroups (12 warps) each holding whole tiles, so the accumulator
// limit counts block_m / 64 wgmma tiles a thread; the rendering says PINGPONG and the mma_sync
// kernel refuses it.
TEST(GemmChoices, PingpongGivesEachOfTwoWarpgroupsWholeTiles) {
  const Template* gemm = Registry::builtin().find("gemm");
  // The search tries it where the epilogue weighs against a tile's main loop: a short K
  // (2349x3584x1024: swapped 128x168 with it, cuBLAS's tiling there, and 128x128 in pairs) or
  // an epilogue (the MLP's 2048x11008x4096 with bias + gelu: 128x128 in pairs); not the same
  // matmul without one (K = 4096).
  const auto short_k = hopper_choices(1, 2349, 3584, 1024);
  EXPECT_EQ(short_k.count("128x168/1Tp"), 1u) << ::testing::PrintToString(short_k);
  EXPECT_EQ(short_k.count("128x128/1c2p"), 1u) << ::testing::PrintToString(short_k);
  TemplateRequest fused = hopper_request(1, 2048, 11008, 4096);
  TensorMeta bias;
  bias.name = "bias", bias.dtype = Dtype::kFloat16, bias.sizes = {11008}, bias.strides = {1};
  fused.spec.inputs.push_back(bias);
  EpilogueOp add, gelu;
  add.op = "add", add.input = 2;
  gelu.op = "gelu";
  fused.spec.epilogue = {add, gelu};
  auto pingpongs = [&](const TemplateRequest& r) {
    std::vector<nlohmann::json> out;
    for (const auto& c : gemm->default_choices(r))
      if (c.value("pingpong", 0) == 1) out.push_back(c);
    return out;
  };
  const auto with_epilogue = pingpongs(fused);
  ASSERT_EQ(with_epilogue.size(), 1u);
  EXPECT_EQ(with_epilogue[0]["block_m"], 128);
  EXPECT_EQ(with_epilogue[0]["block_n"], 128);
  EXPECT_EQ(with_epilogue[0]["cluster_m"], 2);
  EXPECT_TRUE(pingpongs(hopper_request(1, 2048, 11008, 4096)).empty());
  auto refusal = [&](nlohmann::json params) {
    TemplateRequest r = hopper_request(1, 2349, 3584, 1024);
    r.spec.params = std::move(params);
    const auto c = gemm->check(r);
    return c ? std::string() : c.error().fields.at(0).field + ": " + c.error().message;
  };
  const nlohmann::json pp = {{"block_m", 128}, {"block_n", 168}, {"block_k", 64}, {"warps", 12}, {"stages", 5}, {"split_k", 1}, {"cluster_m", 1}, {"swap_ab", 1}, {"pingpong", 1}, {"mma", "wgmma"}};
  EXPECT_EQ(refusal(pp), "");
  EXPECT_EQ(refusal({{"block_m", 64}, {"block_n", 256}, {"block_k", 64}, {"warps", 12}, {"stages", 4}, {"pingpong", 1}, {"mma", "wgmma"}}), "");
  nlohmann::json wide = pp;
  wide["block_n"] = 184;  // 2 x 92 accumulators
  EXPECT_NE(refusal(wide).find("/params/block_n: with pingpong a warpgroup's 128x184 tile holds 184 accumulators per thread; the limit is 176"),
            std::string::npos) << refusal(wide);
  nlohmann::json one = pp;
  one["warps"] = 8;
  EXPECT_NE(refusal(one).find("/params/pingpong: pingpong takes turns between two consumer warpgroups: it needs warps 12, not 8"),
            std::string::npos) << refusal(one);
  EXPECT_NE(refusal({{"mma", "mma_sync"}, {"pingpong", 1}}).find("/params/pingpong"), std::string::npos);
  TemplateRequest r = hopper_request(1, 2349, 3584, 1024);
  r.spec.params = pp;
  const auto k = gemm->render(r, false);
  ASSERT_TRUE(k) << k.error().message;
  EXPECT_NE(k->source.find("constexpr bool PINGPONG = true;"), std::string::npos);
  r.spec.params.erase("pingpong");
  const auto cooperative = gemm->render(r, false);
  ASSERT_TRUE(cooperative) << cooperative.error().message;
  EXPECT_NE(cooperative->source.find("constexpr bool PINGPONG = false;"), std::string::npos);
}

// Few rows streaming B (M <= 256, not compute-bound) try what cuBLAS runs there: 64-row tiles of
// N, M whole in one swapped tile or in two, K whole, in 8 stages and in the deepest ring that
// fits (at most 16), and taller tiles where those take more than a wave; an M of 64-row tiles
// takes 64x64 unswapped instead.
TEST(GemmChoices, FewRowsTryDeepRingsOf64RowTiles) {
  auto stages_of = [](int64_t M, int64_t N, int64_t K, int bm, int bn, bool swap) {
    std::multiset<int> out;
    for (const auto& c : Registry::builtin().find("gemm")->default_choices(hopper_request(1, M, N, K))) {
      if (c["block_m"] == bm && c["block_n"] == bn && c.value("split_k", 1) == 1 && c.value("swap_ab", 0) == int(swap) && c.value("cluster_m", 1) == 1)
        out.insert(c["stages"].get<int>());
    }
    return out;
  };
  EXPECT_EQ(stages_of(65, 5120, 5120, 64, 72, true), (std::multiset<int>{8, 12}));  // cuBLAS: nvjet 64x72, 12 stages
  EXPECT_EQ(stages_of(65, 5120, 5120, 64, 40, true), std::multiset<int>{});         // 160 blocks: past one wave
  EXPECT_EQ(stages_of(40, 2560, 2592, 64, 24, true), (std::multiset<int>{8, 16}));  // M in two tiles of 24
  EXPECT_EQ(stages_of(128, 4096, 4096, 64, 64, false), (std::multiset<int>{8, 13}));
  EXPECT_EQ(stages_of(128, 4096, 4096, 64, 64, true), std::multiset<int>{});
  EXPECT_EQ(stages_of(140, 3072, 3072, 64, 72, true), (std::multiset<int>{8, 12}));  // the H200's cuBLAS: 64x72, 12 stages
  EXPECT_EQ(stages_of(140, 3072, 3072, 64, 144, true), (std::multiset<int>{8}));     // M whole: 8 stages are the deepest ring
  EXPECT_EQ(stages_of(256, 3072, 3072, 64, 64, false), (std::multiset<int>{8, 13}));
  EXPECT_EQ(stages_of(320, 3072, 3072, 64, 64, false), (std::multiset<int>{8}));  // past 256 rows: the search's 64x64 alone
  EXPECT_EQ(stages_of(4096, 4096, 4096, 64, 64, false), std::multiset<int>{});  // compute-bound
  // Where M's 64-row tiles of N take more than a wave, the narrowest taller tiles that take
  // one, in the deepest ring: 2x21504x7200's 336 tiles of 64x8 as 112 of 192x8; 100x11008x4096's
  // 172 of 64x104 as 86 of 128x104; none where 64-row ones fit (2x5120x5120: 80).
  EXPECT_EQ(stages_of(2, 21504, 7200, 192, 8, true), (std::multiset<int>{8}));
  EXPECT_EQ(stages_of(2, 21504, 7200, 128, 8, true), (std::multiset<int>{8}));  // the swapped search's: 168 tiles, no deep ring
  EXPECT_EQ(stages_of(100, 11008, 4096, 128, 104, true), (std::multiset<int>{7}));
  for (int bm : {128, 192, 256}) EXPECT_EQ(stages_of(2, 5120, 5120, bm, 8, true), std::multiset<int>{}) << bm;
  // The rings are checked against the shared memory: 16 stages of 64x24, not 10 of 64x128.
  const Template* gemm = Registry::builtin().find("gemm");
  TemplateRequest r = hopper_request(1, 40, 2560, 2592);
  r.spec.params = {{"block_m", 64}, {"block_n", 24}, {"block_k", 64}, {"warps", 8}, {"stages", 16}, {"swap_ab", 1}, {"mma", "wgmma"}};
  EXPECT_TRUE(gemm->check(r));
  r.spec.params = {{"block_m", 64}, {"block_n", 128}, {"block_k", 64}, {"warps", 8}, {"stages", 10}, {"mma", "wgmma"}};
  const auto refused = gemm->check(r);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().fields.at(0).field, "/params/stages");
}

// The erf gelu of a tuned CUDA kernel is kf_gelu_erf (the erfc form) and its tanh gelu
// kf_gelu_tanh; the reference rendering keeps 0.5 x (1 + erff(x / sqrt 2)) and the tanhf
// formula, so verification compares the two.
TEST(GemmEpilogue, CudaKernelsTakeTheFastGelusAndTheReferenceKeepsTheFormulas) {
  TemplateRequest r = hopper_request(1, 256, 192, 128);
  EpilogueOp gelu;
  gelu.op = "gelu";
  r.spec.epilogue = {gelu};
  const Template* gemm = Registry::builtin().find("gemm");
  ASSERT_TRUE(gemm->check(r));  // fills in the default parameters
  const auto tuned = gemm->render(r, false), reference = gemm->render(r, true);
  ASSERT_TRUE(tuned && reference);
  EXPECT_NE(tuned->source.find("v = kf_gelu_erf(v);"), std::string::npos);
  EXPECT_NE(tuned->source.find("ex2.approx.ftz.f32"), std::string::npos);
  EXPECT_EQ(reference->source.find("kf_gelu_erf"), std::string::npos);
  EXPECT_NE(reference->source.find("erff(v * 0.7071067811865476f)"), std::string::npos);
  // The tanh form: kf_gelu_tanh (x / (1 + e^(-2u))) in the tuned kernel, tanhf in the reference.
  r.spec.epilogue[0].tanh_approx = true;
  const auto tanh_form = gemm->render(r, false), tanh_reference = gemm->render(r, true);
  ASSERT_TRUE(tanh_form && tanh_reference);
  EXPECT_EQ(tanh_form->source.find("kf_gelu_erf"), std::string::npos);
  EXPECT_NE(tanh_form->source.find("v = kf_gelu_tanh(v);"), std::string::npos);
  EXPECT_EQ(tanh_form->source.find("tanhf("), std::string::npos);
  EXPECT_EQ(tanh_reference->source.find("kf_gelu_tanh"), std::string::npos);
  EXPECT_NE(tanh_reference->source.find("tanhf(0.7978845608028654f"), std::string::npos);
}

// The wgmma kernel's epilogue takes outputs two at a time (kf_epilogue2, the second at (m1, n1)):
// each op on both, at each output's own coordinates, but the tuned tanh gelu, which shares one
// rcp between them. A swapped kernel's pair is two rows of C (its coordinates come as (n, m),
// (n1, m1)); the mma_sync kernel and the reference have none.
TEST(GemmEpilogue, TheWgmmaKernelTakesOutputsInPairs) {
  TemplateRequest r = hopper_request(1, 256, 192, 128);
  r.spec.inputs.push_back(matrix("bias", 1, 1, 192));
  r.spec.inputs.back().sizes = {192};
  r.spec.inputs.back().strides = {1};
  r.spec.inputs.push_back(matrix("res", 1, 256, 192));
  EpilogueOp add, gelu, mul;
  add.op = "add";
  add.input = 2;
  gelu.op = "gelu";
  gelu.tanh_approx = true;
  mul.op = "mul";
  mul.input = 3;
  r.spec.epilogue = {add, gelu, mul};
  const Template* gemm = Registry::builtin().find("gemm");
  auto rendered = [&](const nlohmann::json& params, bool reference) {
    TemplateRequest q = r;
    q.spec.params = params;
    EXPECT_TRUE(gemm->check(q)) << params.dump();
    const auto out = gemm->render(q, reference);
    EXPECT_TRUE(out);
    return out ? out->source : std::string();
  };
  const nlohmann::json wgmma = {{"block_m", 128}, {"block_n", 64}, {"block_k", 64}, {"warps", 12}, {"stages", 4}, {"mma", "wgmma"}};
  const std::string tuned = rendered(wgmma, false);
  EXPECT_NE(tuned.find("KF_HD void kf_epilogue2(float& v0, float& v1, int64_t b, int64_t m, int64_t n, int64_t m1, int64_t n1"), std::string::npos);
  // the bias at each output's own column
  EXPECT_NE(tuned.find("v0 = v0 + kf_to_float("), std::string::npos);
  EXPECT_NE(tuned.find("int64_t(n) * 1)]); v1 = v1 + kf_to_float("), std::string::npos);
  EXPECT_NE(tuned.find("int64_t(n1) * 1)]);  // add"), std::string::npos);
  EXPECT_NE(tuned.find("  kf_gelu_tanh2(v0, v1);  // gelu"), std::string::npos);
  EXPECT_NE(tuned.find("__device__ __forceinline__ void kf_gelu_tanh2(float& x, float& y)"), std::string::npos);
  // a full matrix at each output's own row and column
  EXPECT_NE(tuned.find("int64_t(m) * 192 + int64_t(n) * 1)]); v1 = v1 * kf_to_float("), std::string::npos);
  EXPECT_NE(tuned.find("int64_t(m1) * 192 + int64_t(n1) * 1)]);  // mul"), std::string::npos);
  // the kernel's stores call it for two adjacent columns of a row
  EXPECT_NE(tuned.find("kf_epilogue2(v0, v1, b, mc, inside || n < kN ? n : kN - 1, mc, inside || n + 1 < kN ? n + 1 : kN - 1"),
            std::string::npos);
  EXPECT_NE(tuned.find("v = kf_gelu_tanh(v);"), std::string::npos);  // the single form, for the other kernels of the source
  nlohmann::json swapped = wgmma;
  swapped["swap_ab"] = 1;
  const std::string swapped_source = rendered(swapped, false);
  EXPECT_NE(swapped_source.find("kf_epilogue2(float& v0, float& v1, int64_t b, int64_t n, int64_t m, int64_t n1, int64_t m1"), std::string::npos);
  EXPECT_NE(swapped_source.find("int64_t(m1) * 192 + int64_t(n1) * 1)]);  // mul"), std::string::npos);
  // The erf gelu has no pair form: its 13 other instructions already outnumber the SFU's share.
  r.spec.epilogue[1].tanh_approx = false;
  EXPECT_NE(rendered(wgmma, false).find("v0 = kf_gelu_erf(v0); v1 = kf_gelu_erf(v1);"), std::string::npos);
  r.spec.epilogue[1].tanh_approx = true;
  const nlohmann::json mma_sync = {{"block_m", 128}, {"block_n", 128}, {"block_k", 32}, {"warps", 4}, {"stages", 3}, {"mma", "mma_sync"}};
  const std::string sm_80 = rendered(mma_sync, false);
  EXPECT_EQ(sm_80.find("kf_epilogue2"), std::string::npos);
  EXPECT_EQ(sm_80.find("kf_gelu_tanh2"), std::string::npos);  // nor its gelu: the kernel's source is as it was
  EXPECT_EQ(rendered(wgmma, true).find("kf_epilogue2"), std::string::npos);
}

}  // namespace
}  // namespace kforge::core::templates
