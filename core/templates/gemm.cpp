#include "core/templates/gemm.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>

namespace kforge::core::templates {
namespace {

using nlohmann::json;

std::vector<json> ints(std::initializer_list<int> v) { return {v.begin(), v.end()}; }

bool is_float(Dtype d) { return d == Dtype::kFloat32 || d == Dtype::kFloat16 || d == Dtype::kBFloat16; }

std::string dims(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Collects errors for one answer.
struct Problems {
  std::vector<FieldError> list;
  void add(std::string f, std::string m) { list.push_back({std::move(f), std::move(m)}); }
  Result<void> result() const {
    if (list.empty()) return {};
    Error e = Error::make(ErrorKind::kBadRequest, list.size() == 1 ? list[0].message : std::to_string(list.size()) + " problems with the gemm request");
    e.fields = list;
    return std::unexpected(e);
  }
};

int64_t rocm_lds_limit(const std::string&) { return 64 * 1024; }

void check_shapes(const TemplateSpec& s, Problems& p) {
  if (s.inputs.size() < 2) return p.add("/inputs", "gemm takes A and B as inputs[0] and inputs[1]");
  const TensorMeta& a = s.inputs[0];
  const TensorMeta& b = s.inputs[1];
  const TensorMeta& c = s.output;
  if (c.rank() != 2 && c.rank() != 3) return p.add("/output/sizes", "the output is [M, N] or [batch, M, N]");
  if (a.rank() != 2 && a.rank() != 3) return p.add("/inputs/0/sizes", "A is [M, K] or [batch, M, K]");
  if (b.rank() != 2 && b.rank() != 3) return p.add("/inputs/1/sizes", "B is [K, N] or [batch, K, N]");
  if (c.rank() == 2 && (a.rank() == 3 || b.rank() == 3)) return p.add("/output/sizes", "a batched A or B needs a [batch, M, N] output");
  const int64_t batch = c.rank() == 3 ? c.sizes[0] : 1;
  auto m = [](const TensorMeta& t, int i) { return t.sizes[t.rank() - 2 + i]; };
  if (a.rank() == 3 && a.sizes[0] != batch && a.sizes[0] != 1) p.add("/inputs/0/sizes/0", "batch " + std::to_string(a.sizes[0]) + " does not match the output's " + std::to_string(batch));
  if (b.rank() == 3 && b.sizes[0] != batch && b.sizes[0] != 1) p.add("/inputs/1/sizes/0", "batch " + std::to_string(b.sizes[0]) + " does not match the output's " + std::to_string(batch));
  if (m(a, 1) != m(b, 0)) p.add("/inputs/1/sizes", "A is " + dims(a.sizes) + " and B is " + dims(b.sizes) + ": K differs (" + std::to_string(m(a, 1)) + " vs " + std::to_string(m(b, 0)) + ")");
  if (m(a, 0) != m(c, 0)) p.add("/output/sizes", "the output has M = " + std::to_string(m(c, 0)) + " but A has " + std::to_string(m(a, 0)));
  if (m(b, 1) != m(c, 1)) p.add("/output/sizes", "the output has N = " + std::to_string(m(c, 1)) + " but B has " + std::to_string(m(b, 1)));
  if (overlaps(a)) p.add("/inputs/0/strides", "A's strides make elements overlap");
  if (overlaps(b)) p.add("/inputs/1/strides", "B's strides make elements overlap");
  if (!is_float(a.dtype)) p.add("/inputs/0/dtype", "gemm takes float32, float16 or bfloat16");
  if (b.dtype != a.dtype) p.add("/inputs/1/dtype", "A and B must have one dtype (A is " + std::string(dtype_name(a.dtype)) + ")");
  if (!is_float(c.dtype)) p.add("/output/dtype", "the output is float32, float16 or bfloat16");

  std::set<int> used = {0, 1};
  for (size_t i = 0; i < s.epilogue.size(); ++i) {
    const EpilogueOp& op = s.epilogue[i];
    const std::string f = "/epilogue/" + std::to_string(i);
    if (op.op == "cast" && !is_float(op.dtype)) p.add(f + "/dtype", "cast rounds through float32, float16 or bfloat16");
    if (op.input < 0) continue;
    if (op.input < 2) {
      p.add(f + "/input", "inputs 0 and 1 are A and B; epilogue operands are inputs[2] and later");
      continue;
    }
    used.insert(op.input);
    const TensorMeta& e = s.inputs[static_cast<size_t>(op.input)];
    const std::string ef = "/inputs/" + std::to_string(op.input);
    if (!is_float(e.dtype)) p.add(ef + "/dtype", "an epilogue operand is float32, float16 or bfloat16");
    if (e.rank() > c.rank()) {
      p.add(ef + "/sizes", dims(e.sizes) + " has more dimensions than the output " + dims(c.sizes));
      continue;
    }
    for (size_t d = 0; d < e.rank(); ++d) {
      int64_t want = c.sizes[d + c.rank() - e.rank()];
      if (e.sizes[d] != want && e.sizes[d] != 1) {
        p.add(ef + "/sizes/" + std::to_string(d), dims(e.sizes) + " does not broadcast to the output " + dims(c.sizes));
        break;
      }
    }
  }
  for (size_t i = 2; i < s.inputs.size(); ++i) {
    if (!used.contains(static_cast<int>(i))) p.add("/inputs/" + std::to_string(i), "input " + std::to_string(i) + " (`" + s.inputs[i].name + "`) is not used by the epilogue");
  }
}

void check_cpu(const TemplateRequest& r, Problems& p) {
  const json& q = r.spec.params;
  int mr = q["mr"], nr = q["nr"], vec = q["vec"], mc = q["mc"];
  const int width = r.cpu.vector_floats;
  if (vec > width) p.add("/params/vec", "vec " + std::to_string(vec) + " needs wider vectors than the target `" + r.archs[0] + "` has (" + std::to_string(width) + " floats)");
  if (nr % vec != 0) p.add("/params/nr", "nr " + std::to_string(nr) + " must be a multiple of vec " + std::to_string(vec));
  if (mc % mr != 0) p.add("/params/mc", "mc " + std::to_string(mc) + " must be a multiple of mr " + std::to_string(mr));
  const int regs = r.cpu.vector_registers;
  const int need = cpu_registers_needed(mr, nr, vec);
  if (need > regs) p.add("/params/mr", "mr x nr/vec accumulators need " + std::to_string(need) + " vector registers; the target has " + std::to_string(regs));
}

// The shared memory the Hopper kernel asks for: the stages, 1 KiB to align them for the
// 128-byte swizzle, two mbarriers per stage (rounded to 128 bytes) and each consumer warp's
// 2 KiB epilogue buffer.
int64_t wgmma_smem_bytes(int bm, int bn, int stages, int consumers) {
  return int64_t(stages) * (bm + bn) * 64 * 2 + 1024 + (16 * stages + 127) / 128 * 128 + consumers * 4 * 2048;
}

std::string arch_field(const TemplateRequest& r, size_t i) { return r.archs.size() > 1 ? "/arch/" + std::to_string(i) : "/arch"; }

// The Hopper kernel: warps/4 - 1 consumer warpgroups issue wgmma.m64n<block_n>k16 on
// 64-deep K slices that one producer thread loads with TMA into 128-byte-swizzled shared
// memory, `stages` deep.
void check_wgmma(const TemplateRequest& r, const GemmProblem& g, Problems& p) {
  const json& q = r.spec.params;
  int bm = q["block_m"], bn = q["block_n"], bk = q["block_k"], warps = q["warps"], stages = q["stages"];
  if (g.ab == Dtype::kFloat32) return p.add("/params/mma", "wgmma takes float16 or bfloat16 operands; float32 runs on the SIMT kernel (mma_sync)");
  for (size_t i = 0; i < r.archs.size(); ++i) {
    if (r.archs[i] != "sm_90a") p.add(arch_field(r, i), "wgmma exists only on the arch-specific Hopper target sm_90a, not " + r.archs[i]);
  }
  if (bk != 64) p.add("/params/block_k", "the wgmma kernel loads 64-element (128-byte swizzled) K slices: block_k must be 64, not " + std::to_string(bk));
  if (bn % 64 != 0) p.add("/params/block_n", "the wgmma kernel tiles N in 64-column swizzle atoms: block_n must be 64, 128 or 256");
  if (warps != 8 && warps != 12) {
    p.add("/params/warps", "the wgmma kernel runs one producer and one or two consumer warpgroups: warps is 8 or 12, not " + std::to_string(warps));
  } else {
    const int consumers = warps / 4 - 1;
    if (bm % (64 * consumers) != 0) {
      p.add("/params/block_m", std::to_string(consumers) + " consumer warpgroup(s) split block_m " + std::to_string(bm) + " into 64-row wgmma tiles: it must be a multiple of " + std::to_string(64 * consumers));
    } else if (bm / consumers / 64 * bn / 2 > 128) {
      p.add("/params/block_n", "a " + std::to_string(bm / consumers) + "x" + std::to_string(bn) + " consumer tile holds " + std::to_string(bm / consumers / 64 * bn / 2) + " accumulators per thread; the limit is 128 (registers)");
    }
  }
  if (stages < 2) p.add("/params/stages", "the TMA pipeline needs at least 2 stages");
  const int64_t smem = wgmma_smem_bytes(bm, bn, stages, warps == 8 ? 1 : 2);
  if (smem > cuda_smem_limit("sm_90a")) {
    p.add("/params/stages", std::to_string(stages) + " stages of " + std::to_string(bm) + "x" + std::to_string(bn) + "x64 tiles need " + std::to_string(smem) +
                                " bytes of shared memory; sm_90a has " + std::to_string(cuda_smem_limit("sm_90a")));
  }
  const int64_t slices = (g.K + 63) / 64;
  if (const int split_k = q["split_k"]; split_k > slices) {
    p.add("/params/split_k", "split_k " + std::to_string(split_k) + " cuts K = " + std::to_string(g.K) + " (" + std::to_string(slices) +
                                 " slices of 64) into parts with nothing to do: it must be at most " + std::to_string(slices));
  }
  for (int i = 0; i < 2; ++i) {
    std::string why;
    if (!tma_operand(g, i, &why)) p.add("/inputs/" + std::to_string(i) + "/strides", std::string(i ? "B" : "A") + " cannot be loaded by TMA for wgmma: " + why);
  }
}

constexpr int64_t kSms = 132;  // an H100 SXM's, which the Hopper defaults and search are tuned for

// Output tiles of bm x bn over the batch.
int64_t tile_count(const GemmProblem& g, int bm, int bn) { return g.batch * ((g.M + bm - 1) / bm) * ((g.N + bn - 1) / bn); }

// How many ways to split K for bm x bn tiles on an H100's 132 SMs: none while the tiles fill
// half of them; else as many as bring the units of work up to the SMs (at most 8), keeping
// at least 4 K slices in each.
int small_problem_split_k(const GemmProblem& g, int bm, int bn) {
  const int64_t tiles = tile_count(g, bm, bn), slices = (g.K + 63) / 64;
  if (tiles * 2 >= kSms) return 1;
  int64_t split = std::min<int64_t>(8, kSms / tiles);
  while (split > 1 && slices / split < 4) --split;
  return int(split);
}

// Whether the Hopper kernel can run this request (its defaults and choices). The catalog
// asks with no tensors at all.
bool wgmma_viable(const TemplateRequest& r) {
  if (r.archs.empty() || r.spec.inputs.size() < 2) return false;
  if (std::any_of(r.archs.begin(), r.archs.end(), [](const std::string& a) { return a != "sm_90a"; })) return false;
  const GemmProblem g = gemm_problem(r.spec);
  return g.ab != Dtype::kFloat32 && tma_operand(g, 0) && tma_operand(g, 1);
}

void check_cuda(const TemplateRequest& r, const GemmProblem& g, Problems& p) {
  const json& q = r.spec.params;
  if (cuda_mma(q) == CudaMma::kWgmma) return check_wgmma(r, g, p);
  if (q["split_k"] != 1) p.add("/params/split_k", "split_k is the wgmma kernel's (\"mma\": \"wgmma\" on sm_90a); mma_sync and float32 take 1");
  if (q["cluster_m"] != 1) p.add("/params/cluster_m", "cluster_m is the wgmma kernel's (\"mma\": \"wgmma\" on sm_90a); mma_sync and float32 take 1");
  int bm = q["block_m"], bn = q["block_n"], bk = q["block_k"], warps = q["warps"], stages = q["stages"];
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
}

void check_rocm(const TemplateRequest& r, const GemmProblem& g, Problems& p) {
  const json& q = r.spec.params;
  int bm = q["block_m"], bn = q["block_n"], bk = q["block_k"], warps = q["warps"];
  const int64_t lds = (int64_t(bm) + bn) * (bk + 4) * 4;
  for (const auto& a : r.archs) {
    if (lds > rocm_lds_limit(a)) p.add("/params/block_k", "tiles need " + std::to_string(lds) + " bytes of LDS; " + a + " has 65536");
  }
  const int wm = warps >= 2 ? 2 : 1, wn = warps / wm;
  if (bm / wm < 32 || bn / wn < 32 || (bm / wm) % 32 || (bn / wn) % 32) {
    p.add("/params/warps", std::to_string(warps) + " wavefronts split a " + std::to_string(bm) + "x" + std::to_string(bn) + " block into tiles that are not multiples of 32x32 (the MFMA tile)");
  }
  if ((bm / wm / 16) * (bn / wn / 16) * 4 > 128) p.add("/params/warps", "the wavefront tile needs more than 128 accumulator registers");
  (void)g;
}

}  // namespace

int cpu_registers_needed(int mr, int nr, int vec) {
  const int nv = nr / std::max(vec, 1);
  return mr * nv + nv + 1;
}

int64_t cuda_smem_limit(const std::string& arch) {
  int sm = std::atoi(arch.c_str() + 3);
  if (sm == 80 || sm == 87) return 163 * 1024;
  if (sm == 86 || sm == 89 || sm >= 120) return 99 * 1024;
  if (sm >= 90) return 227 * 1024;
  return 64 * 1024;
}

GemmProblem gemm_problem(const TemplateSpec& s) {
  const TensorMeta& a = s.inputs[0];
  const TensorMeta& b = s.inputs[1];
  const TensorMeta& c = s.output;
  GemmProblem g;
  g.rank3 = c.rank() == 3;
  g.batch = g.rank3 ? c.sizes[0] : 1;
  g.M = c.sizes[c.rank() - 2];
  g.N = c.sizes[c.rank() - 1];
  g.K = a.sizes[a.rank() - 1];
  g.ab = a.dtype;
  g.out = c.dtype;
  auto bstride = [](const TensorMeta& t) { return t.rank() == 3 && t.sizes[0] > 1 ? t.strides[0] : 0; };
  g.sAb = bstride(a), g.sAm = a.strides[a.rank() - 2], g.sAk = a.strides[a.rank() - 1], g.offA = a.offset;
  g.sBb = bstride(b), g.sBk = b.strides[b.rank() - 2], g.sBn = b.strides[b.rank() - 1], g.offB = b.offset;
  g.sCb = bstride(c), g.sCm = c.strides[c.rank() - 2], g.sCn = c.strides[c.rank() - 1], g.offC = c.offset;
  // A size-1 dimension's stride is never used; make it 0 so that layouts compare by meaning.
  if (g.M == 1) g.sAm = g.sCm = 0;
  if (g.N == 1) g.sBn = g.sCn = 0;
  if (g.K == 1) g.sAk = g.sBk = 0;
  return g;
}

int wgmma_splits(const GemmProblem& p, int split_k) {
  const int64_t slices = std::max<int64_t>(1, (p.K + 63) / 64), per = (slices + split_k - 1) / split_k;
  return int((slices + per - 1) / per);
}

std::optional<TmaOperand> tma_operand(const GemmProblem& p, int operand, std::string* why) {
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
  if (t.outer_stride % kVec != 0) return fail("its stride " + std::to_string(t.outer_stride) + " is not a multiple of 8 elements (16 bytes)");
  t.batch = s_b == 0 ? 1 : p.batch;
  t.batch_stride = t.batch == 1 ? round_up(t.outer_stride * t.outer) : s_b;
  if (t.batch_stride % kVec != 0) return fail("its batch stride " + std::to_string(s_b) + " is not a multiple of 8 elements (16 bytes)");
  if (off % kVec != 0) return fail("its offset " + std::to_string(off) + " is not a multiple of 8 elements (16 bytes)");
  // TMA coordinates are 32-bit signed, and a tile may start 256 past the last row.
  constexpr int64_t kMaxStrideBytes = int64_t(1) << 40, kMaxDim = (int64_t(1) << 31) - 256;
  if (t.batch_stride * 2 >= kMaxStrideBytes || t.outer_stride * 2 >= kMaxStrideBytes) return fail("a stride is 2^40 bytes or more");
  if (t.inner > kMaxDim || t.outer > kMaxDim || t.batch > kMaxDim) return fail("a dimension exceeds 2^31 - 256 (TMA coordinates are 32-bit)");
  return t;
}

bool runtime_m(const TemplateRequest& req, const GemmProblem& p) {
  if (req.backend != Backend::kCuda || (p.ab != Dtype::kFloat16 && p.ab != Dtype::kBFloat16)) return false;
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

CudaMma cuda_mma(const json& params) {
  // Read before apply_param_specs() checks types: a `mma` that is not a string (5, null,
  // ["wgmma"]) selects nothing here and is refused there, naming /params/mma.
  if (!params.is_object()) return CudaMma::kMmaSync;
  const auto it = params.find("mma");
  return it != params.end() && it->is_string() && it->get_ref<const std::string&>() == "wgmma" ? CudaMma::kWgmma
                                                                                              : CudaMma::kMmaSync;
}

namespace {

// The erf gelu of the CUDA kernels: gelu(x) = x Phi(x) = max(x, 0) - |x| erfc(|x| / sqrt 2) / 2,
// with erfc(z) = t 2^(Q(t) - log2(e) z^2), t = 1 / (1 + 0.387 z) and Q a polynomial of degree 6
// fitted for the smallest largest relative error over z in [0, 11.5] (bench/gelu_fit.py, which
// prints these constants: 1.4e-6; Q less 1 here, so that the one ex2 gives erfc / 2). One rcp,
// one ex2 and 13 others, against 27 for 0.5 x (1 + erff(x / sqrt 2)): the epilogue of a short-K
// gemm is bound by its issue rate. In float its relative error is 1.7e-6 where x > 0, 2.4e-6
// over [-5, 0) and 6.8e-6 over [-12, -5) (the rounding of x^2), where 1 + erff cancels (4.7 %
// and 100 %). |x| is clamped at 16, past which the ex2 is 0, so that gelu(inf) = inf; NaN stays
// NaN and gelu(-inf) = 0, the limit (the erff formula gives NaN). The reference keeps erff.
constexpr const char* kCudaGeluErf = R"(__device__ __forceinline__ float kf_gelu_erf(float x) {
  float a, t, e;
#if __CUDA_ARCH__ >= 800
  asm("min.NaN.f32 %0, %1, 0f41800000;" : "=f"(a) : "f"(fabsf(x)));  // 16
#else
  a = fabsf(x) > 16.0f ? 16.0f : fabsf(x);
#endif
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(a, 2.736503243e-01f, 1.0f)));
  float q = 3.779154952e-01f;
  q = fmaf(q, t, -1.265710321e+00f);
  q = fmaf(q, t, 1.184962210e+00f);
  q = fmaf(q, t, -2.867710197e-01f);
  q = fmaf(q, t, 7.618369621e-01f);
  q = fmaf(q, t, 1.421942592e+00f);
  q = fmaf(q, t, -3.194173870e+00f);
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fmaf(a, a * -0.72134752044448170f, q)));
  return fmaf(-a, t * e, fmaxf(x, 0.0f));
}
)";

// The tanh gelu of a tuned CUDA kernel: 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)) with
// u = sqrt(2 / pi) (x + 0.044715 x^3), so -2u log2(e) = x (c1 + c3 x^2): one ex2, one rcp and 5
// others, and no 1 + tanh(u) that cancels where x < 0. Relative error in float 1.5e-7 where
// x > 0, 1.8e-6 over [-5, 0) and 9.3e-6 over [-10, -5) (the rounding of u) with ex2 and rcp
// correctly rounded (the approx forms add 2-3 ulp), where the tanhf formula's are 1.3e-7, 0.3
// and 1 (bench/gelu_fit.py, which prints c1 and c3). inf gives inf, NaN NaN and -inf NaN, as
// with tanhf; outputs under 2^-120 may be 0 (ftz). The reference keeps the tanhf formula.
constexpr const char* kCudaGeluTanh = R"(__device__ __forceinline__ float kf_gelu_tanh(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * fmaf(x * x, -1.029432396e-01f, -2.302208198e+00f)));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0f));
  return x * r;
}
)";

}  // namespace

EpilogueCode gemm_epilogue(const TemplateRequest& req, const KernelSignature& sig, bool reference) {
  const auto& spec = req.spec;
  EpilogueCode code;
  const bool fast_gelu = req.backend == Backend::kCuda && !reference;
  bool calls_gelu_erf = false, calls_gelu_tanh = false;
  std::ostringstream body;
  std::set<int> declared;
  const TensorMeta& c = spec.output;
  for (const auto& op : spec.epilogue) {
    if (op.input >= 0 && declared.insert(op.input).second) {
      const TensorMeta& t = spec.inputs[static_cast<size_t>(op.input)];
      code.params += ", const " + element_ctype(req.backend, t.dtype) + "* __restrict__ " + sig.arg(op.input);
      code.args += ", " + sig.arg(op.input);
    }
  }
  auto operand = [&](int input) {
    const TensorMeta& t = spec.inputs[static_cast<size_t>(input)];
    static const std::vector<std::string> k3 = {"b", "m", "n"};
    std::vector<std::string> idx(k3.end() - static_cast<long>(t.rank()), k3.end());
    if (c.rank() == 2 && t.rank() == 3) idx = k3;  // cannot happen after check()
    return "kf_to_float(" + sig.arg(input) + "[" + offset_expr(t, idx) + "])";
  };
  for (const auto& op : spec.epilogue) {
    body << "  ";
    if (op.op == "add") body << "v = v + " << operand(op.input) << ";";
    else if (op.op == "mul") body << "v = v * " << operand(op.input) << ";";
    else if (op.op == "scale") body << "v = v * " << std::to_string(op.value) << "f;";
    else if (op.op == "relu") body << "v = v > 0.0f ? v : 0.0f;";
    else if (op.op == "sigmoid") body << "v = 1.0f / (1.0f + expf(-v));";
    else if (op.op == "silu") body << "v = v / (1.0f + expf(-v));";
    else if (op.op == "tanh") body << "v = tanhf(v);";
    else if (op.op == "gelu" && op.tanh_approx && fast_gelu) {
      body << "v = kf_gelu_tanh(v);";
      calls_gelu_tanh = true;
    }
    else if (op.op == "gelu" && op.tanh_approx) body << "v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));";
    else if (op.op == "gelu" && fast_gelu) {
      body << "v = kf_gelu_erf(v);";
      calls_gelu_erf = true;
    }
    else if (op.op == "gelu") body << "v = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));";
    else if (op.op == "cast") body << "{ " << element_ctype(req.backend, op.dtype) << " r; kf_store(&r, v); v = kf_to_float(r); }";
    body << "  // " << op.op << "\n";
  }
  code.function = std::string(calls_gelu_erf ? kCudaGeluErf : "") + (calls_gelu_tanh ? kCudaGeluTanh : "") + "KF_HD float kf_epilogue(float v, int64_t b, int64_t m, int64_t n" +
                  code.params + ") {\n" + "  (void)b; (void)m; (void)n;\n" + body.str() + "  return v;\n}\n";
  return code;
}

std::string GemmTemplate::description() const {
  return "out = epilogue(A @ B): A is inputs[0] ([M,K] or [B,M,K]), B is inputs[1] ([K,N] or [B,K,N]), any strides; "
         "float32/float16/bfloat16 with float32 accumulation; epilogue ops add/mul (inputs[2..], broadcast), scale, relu, "
         "gelu (erf or tanh), silu, sigmoid, tanh, cast.";
}

std::vector<ParamSpec> GemmTemplate::params(const TemplateRequest& req) const {
  switch (req.backend) {
    case Backend::kCpu: {
      // The default register blocking fills the target's vector registers: 12 x 2 vectors of
      // accumulators with 32 registers (AVX-512), 6 x 2 with 16.
      const int w = req.cpu.vector_floats, mr = req.cpu.vector_registers >= 32 ? 12 : 6;
      return {{"mr", "int", ints({2, 4, 6, 8, 12, 14, 16}), mr, "micro-tile rows (register block); default by target: 12 with 32 vector registers (AVX-512), 6 with 16"},
              {"nr", "int", ints({8, 16, 24, 32, 48, 64}), 2 * w, "micro-tile columns (a multiple of vec); default: two vectors of the target"},
              {"vec", "int", ints({4, 8, 16}), w, "floats per vector register: 16 AVX-512, 8 AVX, 4 SSE; default: the target's width"},
              {"mc", "int", ints({16, 24, 32, 48, 64, 96, 112, 128, 144, 192, 256}), 96, "rows of A packed per block (L2)"},
              {"kc", "int", ints({64, 128, 192, 256, 384, 512, 768, 1024}), 512, "depth of a packed panel (at most; K is cut into equal panels)"},
              {"nc", "int", ints({128, 256, 512, 1024, 2048, 4096}), 2048, "columns of B packed per block (L3)"},
              {"threads", "int", ints({0, 1, 2, 4, 8, 16, 32, 64}), 0, "OpenMP threads (0: all cores)"}};
    }
    case Backend::kCuda:
      return {{"block_m", "int", ints({32, 64, 128, 256}), 128, "rows of C per thread block"},
              {"block_n", "int", ints({32, 64, 128, 256}), 128, "columns of C per thread block"},
              {"block_k", "int", ints({8, 16, 32, 64}), 32, "depth of a shared-memory stage"},
              {"warps", "int", ints({1, 2, 4, 8, 12}), 8, "warps per block: mma_sync, a 2 x warps/2 warp grid from 4 on; wgmma, 8 or 12 (one producer and one or two consumer warpgroups)"},
              {"stages", "int", ints({1, 2, 3, 4, 5, 6, 7, 8}), 3, "shared-memory pipeline stages (cp.async for mma_sync, TMA for wgmma; 16-bit types)"},
              {"split_k", "int", ints({1, 2, 3, 4, 5, 6, 7, 8}), 1,
               "wgmma only: parts K is cut into, each a unit of work whose float partial sums a second kernel adds up "
               "(workspace_bytes: split_k x batch x M x N x 4); for problems with too few tiles to fill the GPU"},
              {"cluster_m", "int", ints({1, 2}), 1,
               "wgmma only: blocks per thread-block cluster, on tiles of one column that share B, each loading half of B and "
               "multicasting it to both"},
              {"mma", "enum", {"mma_sync", "wgmma"}, "mma_sync",
               "tensor-core path for 16-bit types: mma_sync (sm_80 on, cp.async + ldmatrix) or wgmma (sm_90a only: TMA loads, "
               "warp-specialized producer/consumer warpgroups); when params is omitted on sm_90a, the wgmma default is used"}};
    case Backend::kRocm:
      return {{"block_m", "int", ints({32, 64, 128, 256}), 64, "rows of C per workgroup"},
              {"block_n", "int", ints({32, 64, 128, 256}), 64, "columns of C per workgroup"},
              {"block_k", "int", ints({8, 16, 32}), 16, "depth of an LDS tile"},
              {"warps", "int", ints({1, 2, 4}), 4, "wavefronts per workgroup (2 x warps/2 from 2 on)"}};
  }
  return {};
}

std::vector<json> GemmTemplate::default_choices(const TemplateRequest& req) const {
  std::vector<json> out;
  switch (req.backend) {
    case Backend::kCpu: {
      // Register blockings that fill the target's vector registers (mr rows x nv vectors of
      // accumulators), each with the cache blockings measured best around it (docs/BENCHMARKS.md).
      const int w = req.cpu.vector_floats, regs = req.cpu.vector_registers;
      using Blocking = std::tuple<int, int, int, int>;
      static const std::vector<Blocking> k32 = {{12, 2, 96, 512}, {12, 2, 96, 768}, {14, 2, 112, 512}, {8, 3, 96, 512},
                                                {8, 3, 96, 768}, {8, 3, 96, 1024}, {6, 4, 96, 512}, {6, 4, 96, 768},
                                                {12, 2, 192, 384}, {4, 3, 96, 512}};
      // 16 registers: 6 x 2 (15 registers) and 4 x 3 (16) are the blockings that fill them.
      static const std::vector<Blocking> k16 = {{6, 2, 96, 384}, {6, 2, 96, 512}, {6, 2, 96, 768}, {6, 2, 192, 512},
                                                {4, 3, 96, 512}, {4, 3, 96, 768}, {4, 3, 128, 384}};
      for (auto [mr, nv, mc, kc] : regs >= 32 ? k32 : k16) {
        if (cpu_registers_needed(mr, nv * w, w) > regs) continue;
        out.push_back({{"mr", mr}, {"nr", nv * w}, {"vec", w}, {"mc", mc}, {"kc", kc}, {"nc", 2048}, {"threads", 0}});
      }
      break;
    }
    case Backend::kCuda:
      if (!req.spec.inputs.empty() && req.spec.inputs[0].dtype == Dtype::kFloat32) {
        for (auto [bm, bn, bk, w] : std::vector<std::tuple<int, int, int, int>>{
                 {128, 128, 8, 8}, {128, 128, 16, 8}, {64, 128, 16, 4}, {128, 64, 16, 4}, {64, 64, 16, 4}, {64, 64, 8, 2}}) {
          out.push_back({{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"warps", w}, {"stages", 1}});
        }
        break;
      }
      if (wgmma_viable(req)) {
        // Hopper: the wgmma tilings only (two consumers with 64- or 128-row tiles, one
        // consumer for narrow or skinny problems): mma_sync won none of the 28 shapes of
        // docs/BENCHMARKS.md's suite on the H100. Where even the largest tiles fill every SM
        // at least once, the problem is compute-bound and a cost model prunes before anything
        // compiles: a tiling's time is its waves (units of work over the SMs, rounded up) times
        // its tile's work over the tensor-core efficiency its shape reaches (1 for 128x256,
        // down to 0.7 for 64x128 and 0.5 for 64x64: rough figures read off the suite runs in docs/BENCHMARKS.md,
        // not a fit); tilings estimated 15 % or more behind the best are not tried (at 4096^3
        // that leaves 6 of 11, as many as a cold autotune times in 15 s). Only these problems
        // try 128x256 in clusters of two, which move a third less through L2 and won the wide
        // LLM projections but lose a little where tiles are few. Smaller problems are memory-
        // or latency-bound, where the model ranks badly (128x64 won 128x4096x4096), so they
        // try every tiling without clusters, 64x64 tiles too (2-3 % ahead of the searched ones at
        // 128x4096x4096 and 128x4096x11008). Where M fits one 64-row tile (decode: M of 1 to 64),
        // a taller tile only computes zeros: they ranked below every 64-row tiling in all 8 such
        // autotunes of the H100 runs of commit 7b57724, so only 64-row tilings are tried.
        const GemmProblem g = gemm_problem(req.spec);
        struct Tiling {
          int bm, bn, warps, stages;
          double efficiency;
          int cluster_m = 1;
        };
        static const std::vector<Tiling> kTilings = {{128, 256, 12, 4, 1.0}, {128, 256, 12, 3, 1.0}, {256, 128, 12, 4, 1.0}, {128, 128, 12, 6, 0.9},
                                                     {128, 128, 8, 6, 0.85}, {64, 256, 8, 5, 0.85}, {64, 128, 8, 8, 0.7}, {128, 64, 12, 8, 0.7}, {64, 64, 8, 8, 0.5},
                                                     {128, 256, 12, 4, 1.0, 2}, {128, 256, 12, 3, 1.0, 2}};
        auto estimate = [&](const Tiling& t) {
          return double((tile_count(g, t.bm, t.bn) + kSms - 1) / kSms) * t.bm * t.bn / t.efficiency;
        };
        const bool compute_bound = tile_count(g, 128, 256) >= kSms;
        double best = std::numeric_limits<double>::max();
        for (const Tiling& t : kTilings) best = std::min(best, estimate(t));
        for (const Tiling& t : kTilings) {
          if (compute_bound ? estimate(t) > 1.15 * best : t.cluster_m > 1 || (g.M <= 64 && t.bm > 64)) continue;
          out.push_back({{"block_m", t.bm}, {"block_n", t.bn}, {"block_k", 64}, {"warps", t.warps}, {"stages", t.stages}, {"split_k", 1},
                         {"cluster_m", t.cluster_m}, {"mma", "wgmma"}});
        }
        // Too few tiles for the SMs: the 64x128 tiling with K split, as the default would, and half as much.
        const int split = small_problem_split_k(g, 64, 128);
        for (int s : {split, split / 2}) {
          if (s > 1) {
            out.push_back({{"block_m", 64}, {"block_n", 128}, {"block_k", 64}, {"warps", 8}, {"stages", 8}, {"split_k", s}, {"cluster_m", 1}, {"mma", "wgmma"}});
          }
        }
        break;
      }
      for (auto [bm, bn, bk, w, s] : std::vector<std::tuple<int, int, int, int, int>>{
               {128, 128, 32, 4, 3}, {128, 128, 32, 4, 4}, {128, 256, 32, 8, 3}, {256, 128, 32, 8, 3}, {128, 128, 64, 4, 3},
               {64, 128, 32, 4, 4}, {128, 64, 32, 4, 4}, {64, 64, 32, 4, 4}, {128, 256, 64, 8, 3}, {64, 256, 32, 4, 3}}) {
        out.push_back({{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"warps", w}, {"stages", s}, {"mma", "mma_sync"}});
      }
      break;
    case Backend::kRocm:
      for (auto [bm, bn, bk, w] : std::vector<std::tuple<int, int, int, int>>{{64, 64, 16, 4}, {128, 128, 16, 4}, {128, 64, 16, 4}, {64, 128, 32, 4}}) {
        out.push_back({{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"warps", w}});
      }
      break;
  }
  return out;
}

Result<void> GemmTemplate::check(TemplateRequest& req) const {
  // The Hopper kernel's tiling, for `"mma": "wgmma"` alone and for sm_90a requests without params.
  static const json kWgmmaDefaults = {{"block_m", 128}, {"block_n", 256}, {"block_k", 64}, {"warps", 12}, {"stages", 4}, {"split_k", 1}, {"cluster_m", 1}, {"mma", "wgmma"}};
  const bool no_params = !req.spec.params.is_object() || req.spec.params.empty();
  if (req.backend == Backend::kCuda && cuda_mma(req.spec.params) == CudaMma::kWgmma) {
    for (auto it = kWgmmaDefaults.begin(); it != kWgmmaDefaults.end(); ++it) {
      if (!req.spec.params.contains(it.key())) req.spec.params[it.key()] = it.value();
    }
  }
  if (auto r = apply_param_specs(params(req), req.spec.params); !r) return r;
  Problems p;
  check_shapes(req.spec, p);
  if (!p.list.empty()) return p.result();
  const GemmProblem g = gemm_problem(req.spec);
  if (req.backend == Backend::kCuda && no_params && wgmma_viable(req)) {
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
  switch (req.backend) {
    case Backend::kCpu: check_cpu(req, p); break;
    case Backend::kCuda: check_cuda(req, g, p); break;
    case Backend::kRocm: check_rocm(req, g, p); break;
  }
  return p.result();
}

Result<Rendered> GemmTemplate::render(const TemplateRequest& req, bool reference) const {
  GemmProblem g = gemm_problem(req.spec);
  g.any_m = runtime_m(req, g);
  KernelSignature sig(req, {{"M", "int64_t", g.any_m ? std::nullopt : std::optional<int64_t>(g.M)},
                            {"N", "int64_t", g.N}, {"K", "int64_t", g.K}, {"batch", "int64_t", g.batch}});
  EpilogueCode ep = gemm_epilogue(req, sig, reference);
  Rendered out;
  uint64_t workspace = 0;
  if (reference) {
    out.source = render_gemm_reference(req, g, sig, ep);
    out.family = "gemm_ref";
  } else {
    switch (req.backend) {
      case Backend::kCpu: out.source = render_gemm_cpu(req, g, sig, ep, workspace); break;
      case Backend::kCuda: out.source = render_gemm_cuda(req, g, sig, ep, workspace); break;
      case Backend::kRocm: out.source = render_gemm_rocm(req, g, sig, ep); break;
    }
    out.family = "gemm";
  }
  out.abi = sig.abi();
  if (g.any_m) {  // the caller's A, C and epilogue inputs over M have M rows: its `M` argument
    auto mark = [&](const TensorMeta& t) {
      for (auto& a : out.abi.args) {
        if (a.kind != ArgKind::kTensor || a.binds != t.name || !a.layout || t.rank() < 2) continue;
        a.layout->size_args[t.rank() - 2] = "M";
      }
    };
    mark(req.spec.inputs[0]);
    mark(req.spec.output);
    for (const auto& op : req.spec.epilogue) {
      if (op.input < 0) continue;
      const TensorMeta& t = req.spec.inputs[static_cast<size_t>(op.input)];
      if (t.rank() >= 2 && t.sizes[t.rank() - 2] != 1) mark(t);  // else broadcast over M (runtime_m())
    }
  }
  // A workspace that grows with a run-time M is the kernel's to say for each M (split_k x M x N x 4 bytes).
  if (!g.any_m || workspace == 0) out.abi.workspace_bytes = workspace;
  return out;
}

}  // namespace kforge::core::templates
