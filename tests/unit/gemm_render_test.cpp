// The gemm template's renderings, pinned: a fixed, broad set of requests (cpu, cuda, rocm;
// float32/float16/bfloat16; mma_sync, wgmma, SIMT; every epilogue op; the four layouts;
// batches, offsets, run-time M, split-K, clusters; the reference renderings) goes through
// Registry::builtin() as the builder calls it, and the sha256 of each rendered source must be
// the one recorded here. A second digest covers everything else a request gets back: the
// parameters after check() (defaults filled in), the ABI, the family, the workspace, the
// parameter specs and the default autotune choices; a third set pins check()'s refusals
// (fields and messages). A redesign of the renderers must leave all three alone: a changed
// source is a new kernel key (a recompile for every cached kernel of that kind).
//
// When a rendering changes on purpose, the failure prints the new row to paste in; with
// KFORGE_RENDER_DUMP=<dir> every source is also written there (one file per case), to diff
// against the sources of the commit before.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/base/hash.hpp"
#include "core/templates/template.hpp"

namespace kforge::core::templates {
namespace {

using nlohmann::json;

// A [batch,] rows x cols matrix: row-major, or column-major (`t`) in its last two dimensions.
TensorMeta mat(const std::string& name, Dtype d, int64_t batch, int64_t rows, int64_t cols, bool t = false, int64_t offset = 0) {
  TensorMeta m;
  m.name = name;
  m.dtype = d;
  m.offset = offset;
  const int64_t rs = t ? 1 : cols, cs = t ? rows : 1;
  if (batch > 0) {
    m.sizes = {batch, rows, cols};
    m.strides = {rows * cols, rs, cs};
  } else {
    m.sizes = {rows, cols};
    m.strides = {rs, cs};
  }
  return m;
}

EpilogueOp op(const std::string& name, int input = -1) {
  EpilogueOp o;
  o.op = name;
  o.input = input;
  return o;
}

struct Case {
  std::string name;
  TemplateRequest req;
  bool reference = false;
};

CpuIsa isa(int floats, int regs) {
  CpuIsa i;
  i.vector_floats = floats;
  i.vector_registers = regs;
  i.fma = true;
  i.features = floats == 16 ? std::vector<std::string>{"avx", "avx2", "avx512f", "fma"} : std::vector<std::string>{"avx", "avx2", "fma"};
  return i;
}

// A gemm request: A is [batch,] M x K (`ta`: column-major), B [batch,] K x N (`tb`), C [batch,] M x N.
TemplateRequest gemm(Backend be, std::vector<std::string> archs, Dtype ab, Dtype out, int64_t batch, int64_t M, int64_t N, int64_t K,
                     bool ta = false, bool tb = false, json params = json::object()) {
  TemplateRequest r;
  r.backend = be;
  r.archs = std::move(archs);
  if (be == Backend::kCpu) r.cpu = r.archs[0] == "x86-64-v4" ? isa(16, 32) : isa(8, 16);
  r.spec.name = "gemm";
  r.spec.params = std::move(params);
  r.spec.inputs = {mat("A", ab, batch, M, K, ta), mat("B", ab, batch, K, N, tb)};
  r.spec.output = mat("C", out, batch, M, N);
  r.spec.input_reorder = {0, 1};
  return r;
}

// Appends an epilogue input and returns its index.
int add_input(TemplateRequest& r, TensorMeta t) {
  r.spec.inputs.push_back(std::move(t));
  r.spec.input_reorder.push_back(int(r.spec.inputs.size()) - 1);
  return int(r.spec.inputs.size()) - 1;
}

TensorMeta vec(const std::string& name, Dtype d, int64_t n) {
  TensorMeta t;
  t.name = name;
  t.dtype = d;
  t.sizes = {n};
  t.strides = {1};
  return t;
}

std::vector<Case> cases() {
  const Dtype f32 = Dtype::kFloat32, f16 = Dtype::kFloat16, bf16 = Dtype::kBFloat16;
  const Backend cpu = Backend::kCpu, cuda = Backend::kCuda, rocm = Backend::kRocm;
  std::vector<Case> out;
  auto add = [&](std::string name, TemplateRequest r, bool reference = false) { out.push_back({std::move(name), std::move(r), reference}); };
  // Epilogue variants on one request: none, bias (by column), relu, gelu, gelu tanh, silu.
  auto epilogues = [&](const std::string& prefix, const TemplateRequest& base, Dtype bias_dtype) {
    add(prefix + "/none", base);
    TemplateRequest b = base;
    const int i = add_input(b, vec("bias", bias_dtype, base.spec.output.sizes.back()));
    b.spec.epilogue = {op("add", i)};
    add(prefix + "/bias", b);
    for (const char* o : {"relu", "gelu", "gelu_tanh", "silu"}) {
      TemplateRequest e = base;
      e.spec.epilogue = {op(std::string(o) == "gelu_tanh" ? "gelu" : o)};
      e.spec.epilogue[0].tanh_approx = std::string(o) == "gelu_tanh";
      add(prefix + "/" + o, e);
    }
  };

  // cpu: both machine models, the three dtypes, the four layouts, split-K with the sums in C
  // and in the workspace, batches with a shared operand and offsets, a long chain.
  epilogues("cpu/v4/f32/nn", gemm(cpu, {"x86-64-v4"}, f32, f32, 0, 127, 253, 61), f32);
  epilogues("cpu/v3/f16/nt", gemm(cpu, {"x86-64-v3"}, f16, f16, 0, 64, 96, 80, false, true), f16);
  add("cpu/v4/bf16/tn", gemm(cpu, {"x86-64-v4"}, bf16, bf16, 0, 33, 48, 17, true, false));
  add("cpu/v3/f32/tt", gemm(cpu, {"x86-64-v3"}, f32, f16, 0, 100, 40, 30, true, true));
  add("cpu/v4/f32/splitk-in-c", gemm(cpu, {"x86-64-v4"}, f32, f32, 0, 256, 256, 2048));
  add("cpu/v4/f16/splitk-workspace", gemm(cpu, {"x86-64-v4"}, f16, f16, 0, 256, 256, 2048));
  add("cpu/v4/f32/params", gemm(cpu, {"x86-64-v4"}, f32, f32, 0, 512, 512, 512, false, false,
                                {{"mr", 8}, {"nr", 48}, {"vec", 16}, {"mc", 96}, {"kc", 256}, {"nc", 1024}, {"threads", 4}}));
  {
    TemplateRequest r = gemm(cpu, {"x86-64-v4"}, f32, f32, 4, 64, 32, 16);
    r.spec.inputs[1] = mat("B", f32, 0, 16, 32, true, 8);  // shared by every batch
    r.spec.inputs[0].offset = 5;
    add("cpu/v4/f32/batched-shared", r);
    add("cpu/v4/f32/batched-shared/reference", r, true);
  }
  auto chain = [&](TemplateRequest r) {
    const Dtype d = r.spec.output.dtype;
    const int full = add_input(r, mat("D", d, 0, r.spec.output.sizes[0], r.spec.output.sizes[1]));
    const int rows = add_input(r, mat("R", f32, 0, r.spec.output.sizes[0], 1));
    EpilogueOp scale = op("scale");
    scale.value = 0.125;
    EpilogueOp cast = op("cast");
    cast.dtype = bf16;
    r.spec.epilogue = {op("add", full), op("mul", rows), scale, op("sigmoid"), op("tanh"), op("gelu"), cast, op("relu")};
    r.spec.input_reorder = {3, 0, 2, 1};
    return r;
  };
  add("cpu/v4/f32/chain", chain(gemm(cpu, {"x86-64-v4"}, f32, f32, 0, 96, 80, 64)));
  add("cpu/v4/f32/chain/reference", chain(gemm(cpu, {"x86-64-v4"}, f32, f32, 0, 96, 80, 64)), true);
  add("cpu/v3/f16/nt/reference", gemm(cpu, {"x86-64-v3"}, f16, f16, 0, 64, 96, 80, false, true), true);

  // cuda mma_sync (sm_80, sm_86, a fat binary): run-time M where no stride depends on it.
  epilogues("cuda/sm_80/f16/nn", gemm(cuda, {"sm_80"}, f16, f16, 0, 256, 512, 128), f16);
  add("cuda/sm_80/bf16/nt/params", gemm(cuda, {"sm_80"}, bf16, bf16, 0, 200, 136, 72, false, true,
                                       {{"block_m", 64}, {"block_n", 128}, {"block_k", 32}, {"warps", 4}, {"stages", 4}}));
  add("cuda/sm_86/f16/tn", gemm(cuda, {"sm_86"}, f16, f32, 0, 128, 128, 64, true, false));
  // K in 4 parts (float partial sums in the workspace, splitk_reduce), B's rows of 2561 off 16 bytes.
  add("cuda/sm_80/f16/nn/split-odd-n", gemm(cuda, {"sm_80"}, f16, f16, 0, 65, 2561, 1000, false, false,
                                          {{"block_m", 64}, {"block_n", 128}, {"block_k", 32}, {"warps", 4}, {"stages", 3}, {"split_k", 4}}));
  {
    TemplateRequest r = gemm(cuda, {"sm_80"}, f16, f16, 3, 64, 64, 32, true, true);
    const int i = add_input(r, vec("bias", f32, 64));
    r.spec.epilogue = {op("add", i), op("relu")};
    add("cuda/sm_80/f16/tt/batched-bias", r);
    add("cuda/sm_80/f16/tt/batched-bias/reference", r, true);
  }
  add("cuda/sm_80+sm_90/f16/nn", gemm(cuda, {"sm_80", "sm_90"}, f16, f16, 0, 96, 96, 96));
  add("cuda/sm_80/f16/chain", chain(gemm(cuda, {"sm_80"}, f16, f16, 0, 96, 80, 64)));
  add("cuda/sm_80/f16/chain/reference", chain(gemm(cuda, {"sm_80"}, f16, f16, 0, 96, 80, 64)), true);
  add("cuda/sm_80/f16/nn/reference", gemm(cuda, {"sm_80"}, f16, f16, 0, 256, 512, 128), true);
  // cuda SIMT (float32).
  add("cuda/sm_80/f32/nn", gemm(cuda, {"sm_80"}, f32, f32, 0, 300, 200, 100));
  add("cuda/sm_90a/f32/tt/params", gemm(cuda, {"sm_90a"}, f32, f32, 2, 64, 64, 64, true, true,
                                        {{"block_m", 64}, {"block_n", 64}, {"block_k", 16}, {"warps", 4}, {"stages", 1}}));
  add("cuda/sm_80/f32/nn/reference", gemm(cuda, {"sm_80"}, f32, f32, 2, 30, 20, 10), true);
  // cuda wgmma: the defaults by problem size (clusters, 64x128, split-K), `"mma": "wgmma"`
  // alone, every epilogue, M-/N-major operands, a non-staged output, batches, M = 1.
  add("cuda/sm_90a/f16/4096", gemm(cuda, {"sm_90a"}, f16, f16, 0, 4096, 4096, 4096));
  add("cuda/sm_90a/bf16/small-splitk", gemm(cuda, {"sm_90a"}, bf16, bf16, 0, 128, 4096, 4096));
  add("cuda/sm_90a/f16/medium", gemm(cuda, {"sm_90a"}, f16, f16, 0, 1024, 2048, 512));
  add("cuda/sm_90a/f16/gemv", gemm(cuda, {"sm_90a"}, f16, f16, 0, 1, 4096, 4096));
  epilogues("cuda/sm_90a/f16/wgmma", gemm(cuda, {"sm_90a"}, f16, f16, 0, 512, 512, 256, false, false, {{"mma", "wgmma"}}), f16);
  add("cuda/sm_90a/bf16/wgmma/tt-f32out", gemm(cuda, {"sm_90a"}, bf16, f32, 0, 256, 384, 192, true, true, {{"mma", "wgmma"}}));
  add("cuda/sm_90a/f16/wgmma/tn-params", gemm(cuda, {"sm_90a"}, f16, f16, 0, 192, 256, 320, true, false,
                                              {{"block_m", 64}, {"block_n", 128}, {"block_k", 64}, {"warps", 8}, {"stages", 6},
                                               {"split_k", 3}, {"cluster_m", 1}, {"mma", "wgmma"}}));
  add("cuda/sm_90a/f16/wgmma/cluster", gemm(cuda, {"sm_90a"}, f16, bf16, 0, 512, 512, 128, false, true,
                                            {{"block_m", 128}, {"block_n", 256}, {"warps", 12}, {"stages", 3}, {"cluster_m", 2}, {"mma", "wgmma"}}));
  add("cuda/sm_90a/f16/wgmma/cluster-2d", gemm(cuda, {"sm_90a"}, f16, f16, 0, 257, 1032, 1000, false, false,
                                               {{"block_m", 128}, {"block_n", 128}, {"warps", 12}, {"stages", 6}, {"cluster_m", 2},
                                                {"cluster_n", 2}, {"mma", "wgmma"}}));
  {
    TemplateRequest r = gemm(cuda, {"sm_90a"}, f16, f16, 4, 128, 128, 64, false, false, {{"mma", "wgmma"}});
    r.spec.inputs[1] = mat("B", f16, 0, 64, 128, false, 16);  // shared by every batch
    const int i = add_input(r, mat("D", f16, 0, 128, 128));
    r.spec.epilogue = {op("mul", i), op("gelu")};
    add("cuda/sm_90a/f16/wgmma/batched-shared", r);
    add("cuda/sm_90a/f16/wgmma/batched-shared/reference", r, true);
  }
  {
    TemplateRequest r = gemm(cuda, {"sm_90a"}, f16, f16, 0, 256, 256, 128, false, false, {{"mma", "wgmma"}});
    r.spec.output.strides = {264, 1};  // rows padded: still staged; an odd row stride is not
    add("cuda/sm_90a/f16/wgmma/padded-c", r);
    r.spec.output.strides = {257, 1};
    add("cuda/sm_90a/f16/wgmma/odd-c", r);
  }
  add("cuda/sm_90a/f16/mma_sync", gemm(cuda, {"sm_90a"}, f16, f16, 0, 256, 256, 256, false, false, {{"mma", "mma_sync"}}));
  {  // swap_ab: the swapped problem, 258 rows of M in two 136-row tiles, a bias over N, batched
    TemplateRequest r = gemm(cuda, {"sm_90a"}, bf16, bf16, 2, 258, 320, 200, false, false,
                             {{"block_m", 128}, {"block_n", 136}, {"warps", 12}, {"stages", 6}, {"split_k", 2}, {"swap_ab", 1}, {"mma", "wgmma"}});
    const int i = add_input(r, vec("bias", f32, 320));
    r.spec.epilogue = {op("add", i), op("gelu")};
    add("cuda/sm_90a/bf16/wgmma/swap-ab", r);
  }
  {  // tail_split: 4647x2048x7168 in 128x192 tiles (two waves and 11 tiles, cut into parts at launch), bias + tanh gelu
    TemplateRequest r = gemm(cuda, {"sm_90a"}, f16, f16, 0, 4647, 2048, 7168, false, false,
                             {{"block_m", 128}, {"block_n", 192}, {"warps", 12}, {"stages", 5}, {"tail_split", 1}, {"mma", "wgmma"}});
    const int i = add_input(r, vec("bias", f32, 2048));
    r.spec.epilogue = {op("add", i), op("gelu")};
    r.spec.epilogue[1].tanh_approx = true;
    add("cuda/sm_90a/f16/wgmma/tail-split", r);
  }
  {  // gemv: decode with B's rows of odd length, K in 4 parts (a cluster), bias + tanh gelu; and its defaults at M = 3
    TemplateRequest r = gemm(cuda, {"sm_90a"}, f16, f16, 0, 1, 1025, 2752, false, false, {{"split_k", 4}, {"mma", "gemv"}});
    const int i = add_input(r, vec("bias", f16, 1025));
    r.spec.epilogue = {op("add", i), op("gelu")};
    r.spec.epilogue[1].tanh_approx = true;
    add("cuda/sm_90a/f16/gemv/odd-n", r);
    add("cuda/sm_90a/bf16/gemv/defaults", gemm(cuda, {"sm_90a"}, bf16, bf16, 0, 3, 1000, 300, false, false, {{"mma", "gemv"}}));
  }

  // rocm: MFMA archs, an RDNA arch, a fat binary; the three dtypes and four layouts.
  epilogues("rocm/gfx90a/f16/nn", gemm(rocm, {"gfx90a"}, f16, f16, 0, 128, 192, 64), f16);
  add("rocm/gfx90a/bf16/nt", gemm(rocm, {"gfx90a"}, bf16, bf16, 0, 100, 64, 48, false, true));
  add("rocm/gfx908/f32/tn", gemm(rocm, {"gfx908"}, f32, f32, 0, 64, 64, 64, true, false));
  add("rocm/gfx1030/f16/tt", gemm(rocm, {"gfx1030"}, f16, f32, 2, 64, 128, 32, true, true));
  add("rocm/gfx90a+gfx1030/bf16/params", gemm(rocm, {"gfx90a", "gfx1030"}, bf16, f16, 0, 256, 256, 256, false, false,
                                              {{"block_m", 128}, {"block_n", 128}, {"block_k", 16}, {"warps", 4}}));
  add("rocm/gfx90a/f32/chain", chain(gemm(rocm, {"gfx90a"}, f32, f32, 0, 96, 80, 64)));
  add("rocm/gfx90a/f32/chain/reference", chain(gemm(rocm, {"gfx90a"}, f32, f32, 0, 96, 80, 64)), true);
  add("rocm/gfx90a/f16/nn/reference", gemm(rocm, {"gfx90a"}, f16, f16, 0, 128, 192, 64), true);
  return out;
}

// Requests check() refuses, each with the fields and messages it answers.
std::vector<Case> refused() {
  const Dtype f32 = Dtype::kFloat32, f16 = Dtype::kFloat16;
  const Backend cpu = Backend::kCpu, cuda = Backend::kCuda, rocm = Backend::kRocm;
  std::vector<Case> out;
  auto add = [&](std::string name, TemplateRequest r) { out.push_back({std::move(name), std::move(r), false}); };
  add("wgmma-on-sm_80", gemm(cuda, {"sm_80", "sm_90a"}, f16, f16, 0, 256, 256, 256, false, false, {{"mma", "wgmma"}}));
  add("wgmma-f32", gemm(cuda, {"sm_90a"}, f32, f32, 0, 256, 256, 256, false, false, {{"mma", "wgmma"}}));
  add("wgmma-limits", gemm(cuda, {"sm_90a"}, f16, f16, 0, 256, 256, 128, false, false,
                           {{"block_m", 64}, {"block_n", 256}, {"block_k", 32}, {"warps", 12}, {"stages", 8}, {"split_k", 4}, {"mma", "wgmma"}}));
  add("wgmma-warps", gemm(cuda, {"sm_90a"}, f16, f16, 0, 256, 256, 128, false, false, {{"warps", 4}, {"mma", "wgmma"}}));
  // Three consumers: 192 rows, at most 192 columns (a block of 512 threads compiles at 128 registers).
  add("wgmma-three-consumers", gemm(cuda, {"sm_90a"}, f16, f16, 0, 256, 256, 128, false, false,
                                    {{"block_m", 192}, {"block_n", 256}, {"warps", 16}, {"stages", 3}, {"mma", "wgmma"}}));
  add("wgmma-three-consumers-rows", gemm(cuda, {"sm_90a"}, f16, f16, 0, 256, 256, 128, false, false,
                                         {{"block_m", 128}, {"block_n", 128}, {"warps", 16}, {"stages", 3}, {"mma", "wgmma"}}));
  add("mma_sync-192-16", gemm(cuda, {"sm_80"}, f16, f16, 0, 256, 256, 128, false, false, {{"block_m", 192}, {"block_n", 64}, {"warps", 16}}));
  {
    TemplateRequest r = gemm(cuda, {"sm_90a"}, f16, f16, 0, 256, 256, 128, false, false, {{"mma", "wgmma"}});
    r.spec.inputs[1].strides = {2 * 256, 2};  // no unit stride
    r.spec.inputs[0].offset = 3;  // copied into the workspace (a packed operand), not refused
    add("wgmma-tma", r);
  }
  add("mma_sync-cluster", gemm(cuda, {"sm_80"}, f16, f16, 0, 256, 256, 128, false, false, {{"split_k", 2}, {"cluster_m", 2}}));
  add("mma_sync-cluster-n", gemm(cuda, {"sm_80"}, f16, f16, 0, 256, 256, 128, false, false, {{"cluster_n", 2}}));
  // 3 x 4 blocks are more than a cluster holds.
  add("wgmma-cluster-size", gemm(cuda, {"sm_90a"}, f16, f16, 0, 256, 256, 128, false, false,
                                 {{"block_m", 128}, {"block_n", 128}, {"warps", 12}, {"stages", 4}, {"cluster_m", 3}, {"cluster_n", 4},
                                  {"tail_split", 1}, {"mma", "wgmma"}}));
  // gemv: 16 rows of C, a block_n whose chunks do not divide a warp's 32 lanes, a cluster along M, sm_80; and B with a stride along N.
  add("gemv-limits", gemm(cuda, {"sm_80"}, f16, f16, 0, 16, 256, 128, false, false, {{"block_n", 64}, {"cluster_m", 2}, {"mma", "gemv"}}));
  add("gemv-b-kmajor", gemm(cuda, {"sm_90a"}, f16, f16, 0, 1, 256, 128, false, true, {{"mma", "gemv"}}));
  // gemv: 12 warps (its rows go 8 apart, one phase a warp), and 16 warps' sums of 8 rows x 120 columns past 48 KiB of shared memory.
  add("gemv-warps", gemm(cuda, {"sm_90a"}, f16, f16, 0, 1, 256, 128, false, false, {{"warps", 12}, {"mma", "gemv"}}));
  add("gemv-smem", gemm(cuda, {"sm_90a"}, f16, f16, 0, 8, 256, 128, false, false, {{"block_n", 120}, {"warps", 16}, {"stages", 2}, {"mma", "gemv"}}));
  add("mma_sync-sm_75", gemm(cuda, {"sm_75"}, f16, f16, 0, 256, 256, 128));
  add("mma_sync-smem", gemm(cuda, {"sm_86"}, f16, f16, 0, 256, 256, 128, false, false,
                            {{"block_m", 256}, {"block_n", 256}, {"block_k", 64}, {"stages", 5}, {"warps", 8}}));
  add("mma_sync-warps", gemm(cuda, {"sm_80"}, f16, f16, 0, 256, 256, 128, false, false, {{"block_m", 32}, {"block_n", 256}, {"warps", 1}}));
  add("simt-limits", gemm(cuda, {"sm_80"}, f32, f32, 0, 256, 256, 128, false, false, {{"block_m", 32}, {"block_n", 32}, {"block_k", 64}, {"warps", 8}}));
  add("cpu-vec", gemm(cpu, {"x86-64-v3"}, f32, f32, 0, 64, 64, 64, false, false, {{"vec", 16}, {"nr", 24}, {"mr", 16}, {"mc", 24}}));
  add("cpu-unknown", gemm(cpu, {"x86-64-v4"}, f32, f32, 0, 64, 64, 64, false, false, {{"block_m", 64}, {"mr", 5}}));
  add("rocm-lds-warps", gemm(rocm, {"gfx90a"}, f16, f16, 0, 64, 64, 64, false, false, {{"block_m", 256}, {"block_n", 256}, {"block_k", 32}, {"warps", 1}}));
  {
    TemplateRequest r = gemm(rocm, {"gfx90a"}, f16, f16, 0, 64, 64, 64);
    r.spec.inputs[1] = mat("B", f16, 0, 65, 64);
    add("shapes", r);
  }
  return out;
}

// {source digest, digest of the rest} per case; refusals: the digest of the error.
const std::map<std::string, std::pair<std::string, std::string>> kPinned = {
    {"cpu/v4/f32/nn/none", {"bc4e5076cac60284b6a1ef4a9de5cf8a6f62bb5d706960cb7eadcc30890dc800", "689f0bba123e39609c91b314855ad49bb16a1ab9cf6133999a80c757e2939f54"}},
    {"cpu/v4/f32/nn/bias", {"03e2caf0e233492509d4193daec9314bd460e7672b77600c823d92d2fbad74ce", "9b393831b74ea6046ed03e1ce9813896ce8a363f3603bd765ed766561840e195"}},
    {"cpu/v4/f32/nn/relu", {"40f2f57b84131e4a456f85e53fca806171ff185f4aae290c0016b7f68ffbd943", "689f0bba123e39609c91b314855ad49bb16a1ab9cf6133999a80c757e2939f54"}},
    {"cpu/v4/f32/nn/gelu", {"abe31e338e46dadf91d92aef5d7da768c9546fdba95b00b345ec9d919a6efb0d", "689f0bba123e39609c91b314855ad49bb16a1ab9cf6133999a80c757e2939f54"}},
    {"cpu/v4/f32/nn/gelu_tanh", {"c9730886b9cbe556662b55e2b0e602ecddce6df6f8117402e9367d3c076fcf51", "689f0bba123e39609c91b314855ad49bb16a1ab9cf6133999a80c757e2939f54"}},
    {"cpu/v4/f32/nn/silu", {"f0881eba5a47f0795bda51e08d0e69aa2bf469fc162f454dbbffd25e42dceae3", "689f0bba123e39609c91b314855ad49bb16a1ab9cf6133999a80c757e2939f54"}},
    {"cpu/v3/f16/nt/none", {"723a0d003553fb18f6ec56be281a6c0383d4c015b668c0da1e2c2269f17cfa3d", "a3050efae9cb62b9c3ec6395e6f7f21ca26d1ac6f6f310ddbad02e4698b65ec3"}},
    {"cpu/v3/f16/nt/bias", {"f7666387717a3c0cf8c66f394fdc4f716dd72eb1026aadda4f4230db7667e5e8", "ba297eb56ade6b7015beaa2f34de6d333b1292625b7ba36df061be92291e2134"}},
    {"cpu/v3/f16/nt/relu", {"a0fd8499180ad6e74a384be5efc1028aa690255e897d13fec5b3284d227d6ab2", "a3050efae9cb62b9c3ec6395e6f7f21ca26d1ac6f6f310ddbad02e4698b65ec3"}},
    {"cpu/v3/f16/nt/gelu", {"501be466d1e9decddb1e5da449a9769afb533c352ec06da3eaa9ca87bd57ef22", "a3050efae9cb62b9c3ec6395e6f7f21ca26d1ac6f6f310ddbad02e4698b65ec3"}},
    {"cpu/v3/f16/nt/gelu_tanh", {"3c2363af145a4876dafef3e23ad6c00030b1d88d7d1418a7cc25270f136614b2", "a3050efae9cb62b9c3ec6395e6f7f21ca26d1ac6f6f310ddbad02e4698b65ec3"}},
    {"cpu/v3/f16/nt/silu", {"395425801557f59cddaea0b61e29bfdc190e6b7f066e8272b259d07a125e1334", "a3050efae9cb62b9c3ec6395e6f7f21ca26d1ac6f6f310ddbad02e4698b65ec3"}},
    {"cpu/v4/bf16/tn", {"c1d1df5a334e108e39c42d7ded08992cca8b418cda2b132bb099e6ddc8648260", "037d27c31c9d50b257ea57f97b68061a423aa4f845100d8b9b8b53753bb42cac"}},
    {"cpu/v3/f32/tt", {"2b791c0e07d9d5209a7a53eb2d2946cacd72f84f65a650461cf6d3ba5bd55e94", "2a9943394822a932df50fd9bac54ef1e3965e6f4344b78181bf078c78f6ed848"}},
    {"cpu/v4/f32/splitk-in-c", {"4a082c8eb5a3c88ad0d104d9cc98ba82463b6188b2a74b4e679772f9cc615e36", "09d6a742cc1e00256ac2850b2ac9959f7f66863814bc5e7ed3e874eb546fdeb3"}},
    {"cpu/v4/f16/splitk-workspace", {"59c3e5d1bec9ffa447bcd6a9ebb23fbcbeee2dda0488c2c173197273fe689de8", "639ff76864c4eda04bb8cc8d093b9bc76b690a78aba0118120317cad79a26dac"}},
    {"cpu/v4/f32/params", {"c5dbe7e9ed9df243f589bfcbba14405a720e3ebe95b194fdb7ab1aa1183ad1e5", "53a1f65981d5e9e815775619ef6c398e1463a2a64d03d2e46b2a2d0cf56359d9"}},
    {"cpu/v4/f32/batched-shared", {"d879dd46c1886badb7042efa4649dad5bcf52957f22df6e1bec151520e3239a1", "a96b3ad42376c7548e9a2fcabb1492b8b182386e5321b399ffdfa76471b64107"}},
    {"cpu/v4/f32/batched-shared/reference", {"2e6a85268e8a706ae11e2bd218713460757cf2f1d83b2aea05038e86eb6e2df8", "505f61eb2395171069806ab78d6af266662ddaf0c90fda1985f1e94c576b6e34"}},
    {"cpu/v4/f32/chain", {"30fe59afe848fa62b3a9f2f6154037cb6e34be07c45cceaf2df9f39fd861b65d", "5ec2992579a763d13b930e1c4a31392f97d05666e3fdb02be3e8bd7c625bb0f1"}},
    {"cpu/v4/f32/chain/reference", {"a64c0c8789a0132bfa134dd3fa1e0ab0e0a99b2ca8ea05d2f9fae044d98e7ef4", "fd306609bdfa3befd928683bd3be8ec7a172872a3ccf218c3776f28d8658f050"}},
    {"cpu/v3/f16/nt/reference", {"9fabe56566aaa0588a415e9d27aaef853744be47a5f26ec2b748b8834506251c", "839f53875fac7321816927912ecc4617b7cdb63247c788f3a54cea5be62524e7"}},
    {"cuda/sm_80/f16/nn/none", {"78ac0e27c8d65b92c80d6e002a69b354438d5a985668d1ee24aa16d617993f68", "f1099321afe18746fd224cc0b436ef323a12d8904e65d9efa451b85908b08646"}},
    {"cuda/sm_80/f16/nn/bias", {"b6a32097a6c90fb8cac0d5a05f755c5974b8b412d425572dab9aa54cdd292988", "f02daf8778b37d8327d27283b422fef54d9cb5e694823b10df1db021123de0c6"}},
    {"cuda/sm_80/f16/nn/relu", {"d6f027bb667b61660fbb4746767feec1e86cc9f4df4599beb02c6997650a369d", "f1099321afe18746fd224cc0b436ef323a12d8904e65d9efa451b85908b08646"}},
    {"cuda/sm_80/f16/nn/gelu", {"c559bf641c577aff9ec7f608b57cdab6e64231b56b24aab96c8944afa1342f31", "f1099321afe18746fd224cc0b436ef323a12d8904e65d9efa451b85908b08646"}},
    {"cuda/sm_80/f16/nn/gelu_tanh", {"c1ae001f74b02eee827b6ecbfee6826d45b2da8a5bfdba8cabb2caa28619b8b7", "f1099321afe18746fd224cc0b436ef323a12d8904e65d9efa451b85908b08646"}},
    {"cuda/sm_80/f16/nn/silu", {"659517d532622e7922aaf43d5cf6784767bbba1eab90147b411678680625a565", "f1099321afe18746fd224cc0b436ef323a12d8904e65d9efa451b85908b08646"}},
    {"cuda/sm_80/bf16/nt/params", {"66382f167c6c5121bef63be73f460c65a9a733bd5c090368fd45ae2d39b2a49f", "b59eddb9208561fe6ff3f2a88faeef55962981ba45c7d1273cc3d4bf9db3ff3c"}},
    {"cuda/sm_86/f16/tn", {"8039358faef9336b07d1e9f6e6f3359ec1dce9adc41ad243ffdd80ab9becd7c7", "2c0bd57f618c34b61446f4a340ae369159d023f0f4cdbf68ee2e0091aa9ee38a"}},
    {"cuda/sm_80/f16/nn/split-odd-n", {"9e319f313257da613d1c79daaadfb5f634eaa9855a30393a139589d7c5d23721", "cd31cde884f9d3f05cb7e4ef8e029f27080436d062fd865f992a59a20c54b7ed"}},
    {"cuda/sm_80/f16/tt/batched-bias", {"2fe917a2c2ee196edd88e5923682b40cd37e44c17575ada1b7384e73426a73a7", "7c35b7a1837dd9fbabe51997d1ec33fe81c122855c3abb34efff4fa32f2a6477"}},
    {"cuda/sm_80/f16/tt/batched-bias/reference", {"864210d47bc8e7685e8d6b02661be1f3236fbf5c85871ac38fdda665962de394", "554d40a61ea3098ebd45583d1bfb6165ffcc2881f389ca47fc0e85ed07bf10d2"}},
    {"cuda/sm_80+sm_90/f16/nn", {"99688042cf4be71903cbd63142baff0fc58b5d1be20f89d6dfe981cb360052d6", "d72fe3718eb4c7c9bcb64fb827673341af6e7ddc2acdc4bdf9922e6c51cf1a78"}},
    {"cuda/sm_80/f16/chain", {"27834cde2d5dea36bb86a1fc8fc7cd282221cd26ba04b4487ccde459cdf90fcd", "08a5bf874542ceaa6fa65823d68802073f547455a605cc54ac25fc4544f6a199"}},
    {"cuda/sm_80/f16/chain/reference", {"3fdc847ab5556d887466fc2cee642ecec5b92ce1303ae76904525964d1c964e5", "76056de4a368a1bf5f18673349b96180601ec39f95ef682a017cb002f4c23400"}},
    {"cuda/sm_80/f16/nn/reference", {"e8850bdfddd6dfe2ccabc2206c3fec790f33ae9ef80fd66a3ac022330deac2ac", "41078e8ab5b7d21b81b9f77c0e46ebfb0d6f39c6c9be00b40a2cc632e8956bc6"}},
    {"cuda/sm_80/f32/nn", {"cd4fcbe6da09d21f092a039371577c676181e8ba7006c3d7b5bdd00f3a1dc4ad", "adb42c42175515a0542be0b3dbca11af94f409951ebe8bead4c10bdc25fcc89f"}},
    {"cuda/sm_90a/f32/tt/params", {"ef31a94d8eb952bcb42d9c60c90e45b496b94cae0a4e872a4d4928928ec912d8", "3bec43ecbfa9c5d88fbeaa2fbe5a2936a3a4265c12b5c0b867975002805fb8b2"}},
    {"cuda/sm_80/f32/nn/reference", {"1ef4a152d1844c2c363b1e17f01e43ead14e614dfd95d716466857ff7ba4cf1e", "63dfccf79635c19d5ee6f14c106255966c1eb777e23f335a63dbae29b52252f1"}},
    {"cuda/sm_90a/f16/4096", {"0c6e11dc1c5fb24e4cdae129adf3dd5d8c55f068016201db5cc8ddafd451918f", "443636b6d4ae5245f0e0d372610d1c023734aa8f8b8cc56521f09187f813b886"}},
    {"cuda/sm_90a/bf16/small-splitk", {"0727e476648223545a88e64df30f4a052fad8de50b609e4f6a66db6f357a9df8", "551a21d0c35797abb5beccedc1f07a3806571213cac509f4f19507132acd514c"}},
    {"cuda/sm_90a/f16/medium", {"6336ad726f5ceb833384b5d048856dfba74265fd0a5a905850ebdce533072690", "41324704817197dc2229b1d5fe2056cbf75056ca0d33c001f05db8dcb4181d92"}},
    {"cuda/sm_90a/f16/gemv", {"5b3934a58a28216ff7fe75df9714c67cc8db2bbe94709f4e9fa3af47f81a5758", "aaba1e0537718eb4dc6b95c822b32d54ba2897772b08ef27d62ccb2cd67eb5d0"}},
    {"cuda/sm_90a/f16/wgmma/none", {"94c5385bdbf6974da9be1ad2f904aaf29c8e61e0e87bb56aecce46595a3592c4", "6ecc8fa0020ba437df5cffcf0fc8e5966f0c54a8b602e81dee6225f2b42e2bea"}},
    {"cuda/sm_90a/f16/wgmma/bias", {"26e3a0be2170b8be9f72a756cbe66861af541fc2b452dd2d5b488086a94d4c2c", "854e29c2376eaade65041d32228d512177296e488ccf7c81cbf5106439b5bb2b"}},
    {"cuda/sm_90a/f16/wgmma/relu", {"d3f8f76706f79e2552775c63a3d2d13f3cc8315c969be0260c1ab53615231d1e", "6ecc8fa0020ba437df5cffcf0fc8e5966f0c54a8b602e81dee6225f2b42e2bea"}},
    {"cuda/sm_90a/f16/wgmma/gelu", {"22ce64d54fe4be942b8808ba59b8a81fb705104187aa933ee76a97691f4bc577", "6ecc8fa0020ba437df5cffcf0fc8e5966f0c54a8b602e81dee6225f2b42e2bea"}},
    {"cuda/sm_90a/f16/wgmma/gelu_tanh", {"d7d28dca2cf251d8c9fffb2aec674009401d5daf0999bf963320c6c5cd00e7af", "6ecc8fa0020ba437df5cffcf0fc8e5966f0c54a8b602e81dee6225f2b42e2bea"}},
    {"cuda/sm_90a/f16/wgmma/silu", {"2e4370e5f4ade7ed4e014f347f620a8ef03a8d00d739340031ddee76663e5e87", "6ecc8fa0020ba437df5cffcf0fc8e5966f0c54a8b602e81dee6225f2b42e2bea"}},
    {"cuda/sm_90a/bf16/wgmma/tt-f32out", {"bc9ed99255b70e205455d7339290b3b2fa1adcf8f2c2845d16bea957ab46ff18", "a044b0291949d2ffa0a926131cc4d1a6c300401b284419fb94298bd6d5374b23"}},
    {"cuda/sm_90a/f16/wgmma/tn-params", {"f94a0bf0d524cd286e8943e94380227ef90ef6cd64dd96b7ed36571d94a8c184", "0b45bcb9e05c5ec62ec8cbee1ec30ad63b5725b79a350511a2083823636c1080"}},
    {"cuda/sm_90a/f16/wgmma/cluster", {"a2074384307a54c5234850a446ae3ce4d1f533c757b8a14d2f19d7b43ae6080b", "f53a08fb98532cad6250b4f9963c56a8bb50ea9466885d04d35eca72ecfb175b"}},
    {"cuda/sm_90a/f16/wgmma/cluster-2d", {"ee57efcdeee1c9233abbee7d437b7345a74bb796625d8faebfefbf3c3e328bdd", "b510036379d03c792615ef4799aac467349641b71a006730fa4452e1f4565bcf"}},
    {"cuda/sm_90a/f16/wgmma/batched-shared", {"41f60388bb7857788db907dace40ccf22b2c0cfd86e9bd6131c23005cb2a3f77", "8d93329fe444f87623628a45bb41bbe636158fe5329de1ce2423f69ee4177edf"}},
    {"cuda/sm_90a/f16/wgmma/batched-shared/reference", {"f010cd264a185e3e2a5bd2eec7723f1f911b0b621c078aa2819bd759696a29cb", "21081ece4421c2c63fb97dbd5b4fef32b37a8e015da9f19d8d313cf54b39ef8e"}},
    {"cuda/sm_90a/f16/wgmma/padded-c", {"9bef05328004228a895cf2e64c24a7da4ee5b2cbbe3d3c418fdf45e86bed2165", "03cae80d326e7468919f42699fea950c37fc86bdeeb787a39c5421a1aa943792"}},
    {"cuda/sm_90a/f16/wgmma/odd-c", {"2bb6b6d23f80e0afa3fdb8f5d75b535a4f01476ef88fbfcdd8df8746d10911e0", "c68ffa656894a93c926c8306989e53c1e3e053a9aab030973cbf37cf9b993738"}},
    {"cuda/sm_90a/f16/mma_sync", {"cbbea5c4686cd6d60b1bedcde84af4b0754db2109151f8074d260b5ab4646138", "c09c8bc4b17a004f2ab5890beafb71cbefd65c6f83f14f6075538e9c71227ff7"}},
    {"cuda/sm_90a/bf16/wgmma/swap-ab", {"908df2a7fc73d74e807e38346edf21be9eb8a3caff290676a58812aed1f9b127", "24eeed016af1f7149df1504e0e32b951f81e547ddd0e82b5032198197c2a6b78"}},
    {"cuda/sm_90a/f16/wgmma/tail-split", {"f95f5e38e00b7808aa3263d624645b1aaff8f9008be5c0c8a463da139eb8d216", "63ed5b43c6c27db10867569cc9a036f29e9ee78dee7e2207773f8ab9be0433df"}},
    {"rocm/gfx90a/f16/nn/none", {"890d16f8a358bf6119f03e56e56f33344200001cb136447377e476ddd98ef545", "08a07e41b203492d90d379be47e81a5ca709551291f62e046b790934ff77acc9"}},
    {"rocm/gfx90a/f16/nn/bias", {"599db859d8e97b254410efb78079059bfd7a7f3bca3701f12446e3209b3ba1dc", "456e7260db1a67c1efcf8c5b14bcc1c590b62c45ecacc2b5088400094391d241"}},
    {"rocm/gfx90a/f16/nn/relu", {"727a2f91dcebb22217dc9ea713097b082c1225ca250772ba4003ce043cdb577e", "08a07e41b203492d90d379be47e81a5ca709551291f62e046b790934ff77acc9"}},
    {"rocm/gfx90a/f16/nn/gelu", {"b48a447fe4810bfa9718af8a0314e8da30c0f30b6ca2aa006466cfe9f4b97483", "08a07e41b203492d90d379be47e81a5ca709551291f62e046b790934ff77acc9"}},
    {"rocm/gfx90a/f16/nn/gelu_tanh", {"b556a088e992f2d06b8ddd72665dbea731775580891d10f85356885ac33eb16e", "08a07e41b203492d90d379be47e81a5ca709551291f62e046b790934ff77acc9"}},
    {"rocm/gfx90a/f16/nn/silu", {"353aaad59f7f385c7d6f77f628d015feb72f84c839e510c0435528a2b66fdd01", "08a07e41b203492d90d379be47e81a5ca709551291f62e046b790934ff77acc9"}},
    {"rocm/gfx90a/bf16/nt", {"75c6742bdf007d4c5254f55f1e9783d8ed31e21a340cb30bbdf6261b8f13db3f", "76a99d3ab22c71e08a28cd8c08ef6a176b76d0646bf61f4a8600d5cb91d1c68d"}},
    {"rocm/gfx908/f32/tn", {"62a991e5d21e5b60475349a7f9dda3baefc999cf1b8bcd127f2b9721ee37e7c6", "5e2cbe762193e50b357e5f3c3c6992c26b9cc4d12dbe6428ba1ec5616b4d85f2"}},
    {"rocm/gfx1030/f16/tt", {"85048021255b3b08bc7532ebfcb8d98ab014af045cec7fef6a4176514d106e84", "95e67d60da063aaf469de8944f8b261f500fcf7d15f623554c4e0187dd89e781"}},
    {"rocm/gfx90a+gfx1030/bf16/params", {"418e0145df6b0522652bbcb5dba6c0f64e07a78db52b31a621d78848731c10f9", "75bb9a983a8507017193a649cfbe783b3bc7fb17e384678d630a2d8c41317636"}},
    {"rocm/gfx90a/f32/chain", {"8f51b0a5fcf56fed5c6fc77c429cc9169967f44164fe53a08e673a0bcd912e54", "3542ced7e8d3c98111b9fd643a024e996d5908418d596511087cfb93a9eadcea"}},
    {"rocm/gfx90a/f32/chain/reference", {"e2448d09dbe2760aace4c85a9b90d9379316d07c6a5d4747576e1fd21e9aee43", "582926d1e7ce8567b0570d6b85973bf1d163172042308f604775e5410826095b"}},
    {"rocm/gfx90a/f16/nn/reference", {"bd57cf75be7402d0e4d441c1f1048e1e1676aaf49a2f2f791538ad10da22c746", "14976645588fb5740e6a8fd149ea4e1634cb5b4ff1b65dff993fd00055a7765b"}},
    {"cuda/sm_90a/f16/gemv/odd-n", {"f926de8388b137802ff3d352f80ce3d83345f30a9c11dbbf4574b273f5a1d013", "2f688d4b359a190b56b3a441392382e15c4e52f9d6bb14055d7653f6cbd7ac88"}},
    {"cuda/sm_90a/bf16/gemv/defaults", {"0bdb2caa2d46491fa41d9128aecc6c932c58cd9fb61e9e4036e4077a378fdf34", "0c21a5e5c96051bdf9d1b34646d89b390e4a611d60d1fd45665858a6499652c1"}},
};
const std::map<std::string, std::string> kRefusals = {
    {"wgmma-on-sm_80", "82dce1b0a8f3b25dcfa39cc9863c91fe44c9dd11bd779e691f3738e08df4ca3a"},
    {"wgmma-f32", "5756387933e5d77dc01d5d0ea103e73846e96a46f77d5fe8978524b231ce9e08"},
    {"wgmma-limits", "d7c991309992f9cfd239e0cdbed661f6693dad7a1d391a7d58482bd9d42dd9be"},
    {"wgmma-warps", "593520a2333b9ab2cfbbc5da0e47de3079a0b77ff2e0461366da0b09bae11f1c"},
    {"wgmma-three-consumers", "fc61959bbed3d451eac236ab597ff52bbcd6da6e764196b4990b33af11b1fd69"},
    {"wgmma-three-consumers-rows", "d0acbb36a89daab9f5f50b297467f167f2189d809b66eab73a271a7310cf8614"},
    {"mma_sync-192-16", "d8a720f47e20e00b0ed31359ee1a3b5da8d6f9f44a2ecb19e660f655c4b34e4e"},
    {"wgmma-tma", "17071daaff813a0e46a5d38598a21c87eced808fa71f8bf3b6263bd130397d87"},
    {"mma_sync-cluster", "a21c9b63b3a6eda86c0fbc45e5b6e33e0c43f453b4edb96c4f4bf9f2213db077"},
    {"mma_sync-cluster-n", "1a14a562b25ae6a6ad65c488a3767295817d52bf7a376e338fe4fba9bd1bf0a7"},
    {"wgmma-cluster-size", "3e5a972fe19496900087b1f131291a3779a84ae6099992ae2016c55f3ec3f206"},
    {"mma_sync-sm_75", "f012173b3359f45c8eec2469533b89cb4491872e848b5eb6dfbeffb97d6ba355"},
    {"mma_sync-smem", "5474de748b441a07954037d8402deab63fc5e5c9241da909b30f43bfa7dcaa07"},
    {"mma_sync-warps", "66cbfc1685f0a1942ef21d415c8e12757a0538359139e528939841debb662a9a"},
    {"simt-limits", "d6811f18519ee6a33d02c45962f094e1524a95701940e4ea0aa2faf5adebceb2"},
    {"cpu-vec", "c28b0e5173ed543c6551d3a92fdf670fb0cc99504911ccf9f60187fbed4a2ed5"},
    {"cpu-unknown", "66eb53091273bce4d1e1248617d96ce70342970e2cfeaf39dbfd834f84269729"},
    {"rocm-lds-warps", "15a8a10703c39cd9b8d7694bb51b0ce4bbf311221173846a9ebef60165635f9a"},
    {"shapes", "67a25ec70f581cbb0131532189514124cffd5f2dab80b5841a77810e12ae8285"},
    {"gemv-limits", "75211c22d3dc1fc73aa34edbd16418be6240de445d86d8909e1cecaa9eca7e37"},
    {"gemv-b-kmajor", "d033fcd38f315eb76dc6f5e418f16a284e12bcf5bf8992da98404cc27979f8f6"},
    {"gemv-warps", "a85b55532a0f8a022ac8be375cbf7729c0623d7cbb2ab644675aa099e8590cc9"},
    {"gemv-smem", "476d1196743ed4edd0e1c29cd1eccbb11d9614eb75a185e614611aae13b2cfcb"},
};

void print_row(const std::string& name, const std::string& a, const std::string& b) {
  std::printf("    {\"%s\", {\"%s\", \"%s\"}},\n", name.c_str(), a.c_str(), b.c_str());
}

TEST(GemmRender, EveryRenderingIsTheOnePinned) {
  const Template* gemm = Registry::builtin().find("gemm");
  ASSERT_NE(gemm, nullptr);
  size_t checked = 0;
  for (Case& c : cases()) {
    SCOPED_TRACE(c.name);
    TemplateRequest r = c.req;
    const json specs = gemm->describe(r)["params"];
    json choices = json::array();
    for (const json& ch : gemm->default_choices(r)) choices.push_back(ch);
    const auto ok = gemm->check(r);
    ASSERT_TRUE(ok) << ok.error().message;
    const auto rendered = gemm->render(r, c.reference);
    ASSERT_TRUE(rendered) << rendered.error().message;
    const std::string src = sha256_hex(rendered->source);
    if (const char* dir = std::getenv("KFORGE_RENDER_DUMP")) {
      std::string file = c.name;
      for (char& ch : file) ch = ch == '/' ? '.' : ch;
      std::filesystem::create_directories(dir);
      std::ofstream(std::filesystem::path(dir) / file, std::ios::binary) << rendered->source;
    }
    const json rest = {{"params", r.spec.params}, {"abi", rendered->abi.to_json()}, {"family", rendered->family},
                       {"workspace", rendered->abi.workspace_bytes ? json(*rendered->abi.workspace_bytes) : json(nullptr)},
                       {"specs", specs}, {"choices", choices}};
    const std::string meta = sha256_hex(rest.dump());
    const auto it = kPinned.find(c.name);
    if (it == kPinned.end() || it->second.first != src || it->second.second != meta) {
      ADD_FAILURE() << "rendering differs from the pinned one; the row now:";
      print_row(c.name, src, meta);
      continue;
    }
    ++checked;
  }
  EXPECT_EQ(checked, kPinned.size());
}

TEST(GemmRender, EveryRefusalIsTheOnePinned) {
  const Template* gemm = Registry::builtin().find("gemm");
  size_t checked = 0;
  for (Case& c : refused()) {
    SCOPED_TRACE(c.name);
    TemplateRequest r = c.req;
    const auto ok = gemm->check(r);
    ASSERT_FALSE(ok) << "check() accepted it";
    json fields = json::array();
    for (const auto& f : ok.error().fields) fields.push_back({f.field, f.message});
    const std::string digest = sha256_hex(json{{"message", ok.error().message}, {"fields", fields}}.dump());
    const auto it = kRefusals.find(c.name);
    if (it == kRefusals.end() || it->second != digest) {
      ADD_FAILURE() << "refusal differs from the pinned one: " << fields.dump() << "; the row now:";
      std::printf("    {\"%s\", \"%s\"},\n", c.name.c_str(), digest.c_str());
      continue;
    }
    ++checked;
  }
  EXPECT_EQ(checked, kRefusals.size());
}

}  // namespace
}  // namespace kforge::core::templates
