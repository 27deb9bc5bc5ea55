// The Hopper gemm's default search (the cuda backend's default_choices, gemm_cuda.cpp, on
// sm_90a): wgmma tilings only, pruned by the cost model where the problem is compute-bound
// (which alone tries clusters), split-K added where the tiles leave SMs idle. And which gelu
// each rendering uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

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

// "bm x bn / split", and "c2" for a cluster of two, for each choice, all of them wgmma.
std::multiset<std::string> hopper_choices(int64_t batch, int64_t M, int64_t N, int64_t K) {
  TemplateRequest r;
  r.backend = Backend::kCuda;
  r.archs = {"sm_90a"};
  r.spec.name = "gemm";
  r.spec.inputs = {matrix("A", batch, M, K), matrix("B", batch, K, N)};
  r.spec.output = matrix("C", batch, M, N);
  std::multiset<std::string> out;
  for (const auto& c : Registry::builtin().find("gemm")->default_choices(r)) {
    EXPECT_EQ(c.value("mma", ""), "wgmma") << c.dump();
    out.insert(std::to_string(c["block_m"].get<int>()) + "x" + std::to_string(c["block_n"].get<int>()) + "/" +
               std::to_string(c.value("split_k", 1)) + (c.value("cluster_m", 1) == 2 ? "c2" : "") +
               (c.value("tail_split", 1) > 1 ? "t" : ""));
  }
  return out;
}

// A last wave that leaves most SMs idle: the tilings whose last-wave tiles cut into parts of
// K (tail_split, "t") the model puts clearly ahead are tried too, at most three; where the
// last wave is nearly full (4096^3: 116 of 132) or the tiles are fewer than the SMs (split-K's
// case), none are.
TEST(GemmChoices, APartialLastWaveTriesCuttingItsTilesIntoPartsOfK) {
  auto tails = [](const std::multiset<std::string>& c) {
    return std::count_if(c.begin(), c.end(), [](const std::string& s) { return s.ends_with("t"); });
  };
  // 2048x11008x4096: 688 tiles of 128x256, 5 waves and 28 (a fifth of a wave).
  const auto llm = hopper_choices(1, 2048, 11008, 4096);
  EXPECT_GE(tails(llm), 1);
  EXPECT_LE(tails(llm), 3);
  EXPECT_TRUE(llm.count("128x256/1t")) << ::testing::PrintToString(llm);
  // 257x4096x4096: M one past two 128-row tiles; 64-row tiles, 160 of 64x128: a wave and 28.
  EXPECT_GE(tails(hopper_choices(1, 257, 4096, 4096)), 1);
  EXPECT_EQ(tails(hopper_choices(1, 4096, 4096, 4096)), 0);
  EXPECT_EQ(tails(hopper_choices(1, 1, 4096, 4096)), 0);
  EXPECT_EQ(tails(hopper_choices(1, 100, 1000, 1000)), 0);
}

TEST(GemmChoices, ComputeBoundProblemsSkipTheTilingsTheCostModelPutsFarBehind) {
  // 4096^3: 512 tiles of 128x256 (4 waves on 132 SMs), also tried in clusters of two; 128x128
  // with two consumers is 1.11x the best; 64x256 and 128x128 with one consumer 1.18x, and
  // 64x128 and 128x64 tiles (16 waves of a quarter of the work at 0.7) 1.43x: not tried.
  EXPECT_EQ(hopper_choices(1, 4096, 4096, 4096),
            (std::multiset<std::string>{"128x256/1", "128x256/1", "256x128/1", "128x128/1", "128x256/1c2", "128x256/1c2"}));
}

TEST(GemmChoices, SmallProblemsTryEveryTilingAndSplitK) {
  // 128x4096x4096: 16 tiles of 128x256, memory-bound, where 128x64 won on the H100; 64 tiles
  // of 64x128 fill half the SMs, so K is split 2 ways (and not 1 = half of that). Every
  // tiling, 64x64 included.
  const auto small = hopper_choices(1, 128, 4096, 4096);
  EXPECT_EQ(small.size(), 10u);
  EXPECT_EQ(small.count("64x128/2"), 1u);
  EXPECT_EQ(small.count("128x64/1"), 1u);
  EXPECT_EQ(small.count("64x64/1"), 1u);
  // M = 1: 32 tiles of 64x128, split 4 ways (128 units), and 2; of the tilings, only those of
  // 64 rows (a taller tile would compute zeros).
  const auto gemv = hopper_choices(1, 1, 4096, 4096);
  EXPECT_EQ(gemv, (std::multiset<std::string>{"64x256/1", "64x128/1", "64x64/1", "64x128/4", "64x128/2"}));
  // M = 64 is still one 64-row tile; M = 65 is not.
  for (const std::string& c : hopper_choices(1, 64, 4096, 4096)) EXPECT_EQ(c.rfind("64x", 0), 0u) << c;
  EXPECT_EQ(hopper_choices(1, 65, 4096, 4096).count("128x128/1"), 2u);
  // Neither tries clusters.
  for (const auto* choices : {&small, &gemv}) {
    for (const std::string& c : *choices) EXPECT_EQ(c.find("c2"), std::string::npos) << c;
  }
  // Batched attention scores: 32 x 8 x 8 = 2048 tiles of 256, compute-bound by the model.
  EXPECT_EQ(hopper_choices(32, 2048, 2048, 128).count("64x128/1"), 0u);
}

// The erf gelu of a tuned CUDA kernel is kf_gelu_erf (the erfc form) and its tanh gelu
// kf_gelu_tanh; the reference rendering keeps 0.5 x (1 + erff(x / sqrt 2)) and the tanhf
// formula, so verification compares the two.
TEST(GemmEpilogue, CudaKernelsTakeTheFastGelusAndTheReferenceKeepsTheFormulas) {
  TemplateRequest r;
  r.backend = Backend::kCuda;
  r.archs = {"sm_90a"};
  r.spec.name = "gemm";
  r.spec.inputs = {matrix("A", 1, 256, 128), matrix("B", 1, 128, 192)};
  r.spec.output = matrix("C", 1, 256, 192);
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

}  // namespace
}  // namespace kforge::core::templates
