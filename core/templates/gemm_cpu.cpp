// The cpu backend of the gemm template (its parameters, defaults by target, default autotune
// choices, checks and rendering; kernel files gemm/cpu.inc and gemm/reference_cpu.inc). The
// kernel: BLIS-style blocking (jc -> pc -> ic -> jr groups -> ir -> jr), A and B packed
// into contiguous float panels (converting float16/bfloat16 and any strides on the way), an
// MR x NR register-blocked micro-kernel on GCC vector extensions. One OpenMP region for the
// whole call: each thread owns a fixed block of C's micro-tiles (rows first), packs its own A
// rows, and shares the packing of each B block (double-buffered, one barrier per K panel).
// When K spans several kc panels the partial sums live in C itself (float32 output with
// contiguous rows and no epilogue tensor that could alias it), else in the float32 workspace.
#include <algorithm>
#include <tuple>

#include "core/templates/gemm_backend.hpp"
#include "core/templates/kernel_file.hpp"
#include "core/templates/render_util.hpp"

namespace kforge::core::templates {
namespace {

using nlohmann::json;

// Vector registers the micro-kernel holds at once: mr x nr/vec accumulators, nr/vec B vectors
// and one broadcast A value.
int cpu_registers_needed(int mr, int nr, int vec) {
  const int nv = nr / std::max(vec, 1);
  return mr * nv + nv + 1;
}

class CpuGemm final : public GemmBackend {
 public:
  std::vector<ParamSpec> params(const TemplateRequest& req) const override;
  std::vector<json> default_choices(const TemplateRequest& req) const override;
  void check(const TemplateRequest& req, const GemmProblem& g, Problems& p) const override;
  std::string render(const TemplateRequest& req, const GemmProblem& g, const KernelSignature& sig, const EpilogueCode& ep,
                     bool reference, uint64_t& workspace_bytes) const override;
};

std::vector<ParamSpec> CpuGemm::params(const TemplateRequest& req) const {
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

std::vector<json> CpuGemm::default_choices(const TemplateRequest& req) const {
  std::vector<json> out;
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
  return out;
}

void CpuGemm::check(const TemplateRequest& r, const GemmProblem&, Problems& p) const {
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

std::string CpuGemm::render(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig, const EpilogueCode& ep,
                            bool reference, uint64_t& workspace_bytes) const {
  if (reference) return render_reference_cpu(req, p, sig, ep);
  static const KernelFile& kernel = kernel_file("gemm/cpu.inc");
  const auto& q = req.spec.params;
  const int kc = q["kc"];
  const bool acc_in_c = p.out == Dtype::kFloat32 && p.sCn == 1 && ep.args.empty();
  workspace_bytes = p.K > kc && !acc_in_c ? uint64_t(p.M) * uint64_t(p.N) * 4 : 0;
  Subst s;
  s.set("TA", element_ctype(req.backend, p.ab)).set("TC", element_ctype(req.backend, p.out));
  set_problem(s, p);
  for (const char* k : {"mr", "nr", "vec", "mc", "kc", "nc", "threads"}) s.set(k, q[k].get<int>());
  s.set("A", sig.arg(0)).set("B", sig.arg(1)).set("C", sig.out_arg()).set("EPARGS", ep.args);
  s.set("DECL", sig.declaration()).set("NULLCHECKS", sig.null_checks("  ")).set("EPILOGUE", ep.function);
  s.set("WS", workspace_bytes).set("ACC_IN_C", acc_in_c ? "true" : "false");
  s.set("IDENTITY", req.spec.epilogue.empty() && p.out == Dtype::kFloat32 ? "true" : "false");
  const int vec = q["vec"];
  s.set("BCAST", vec == 16 ? "_mm512_set1_ps" : vec == 8 ? "_mm256_set1_ps" : "_mm_set1_ps");
  return prelude(req.backend) + "#include <atomic>\n\nnamespace {\n" + problem_constants(s, p) + s.apply(kernel.section("kernel"));
}

}  // namespace

const GemmBackend& gemm_cpu_backend() {
  static const CpuGemm backend;
  return backend;
}

}  // namespace kforge::core::templates
