// The rocm backend of the gemm template: its parameters, default autotune choices, checks and
// rendering (kernel files gemm/rocm.hip and gemm/reference.cuh). The kernel is LDS-tiled, one
// for every arch of a fat binary. On CDNA (gfx908, gfx90a, gfx94x) each wavefront computes its
// tile with 16x16 MFMA instructions (v_mfma_f32_16x16x16f16, ..._16x16x16bf16_1k on gfx90a+,
// ..._16x16x4f32); elsewhere (RDNA, older GCN) the same tiles are computed by plain FMAs. The
// launch configuration is the same for both, so the host code does not need to know which
// arch it runs on.
#include <sstream>
#include <tuple>

#include "core/templates/gemm_backend.hpp"
#include "core/templates/kernel_file.hpp"
#include "core/templates/render_util.hpp"

namespace kforge::core::templates {
namespace {

using nlohmann::json;

int64_t rocm_lds_limit(const std::string&) { return 64 * 1024; }

class RocmGemm final : public GemmBackend {
 public:
  std::vector<ParamSpec> params(const TemplateRequest& req) const override;
  std::vector<json> default_choices(const TemplateRequest& req) const override;
  void check(const TemplateRequest& req, const GemmProblem& g, Problems& p) const override;
  std::string render(const TemplateRequest& req, const GemmProblem& g, const KernelSignature& sig, const EpilogueCode& ep,
                     bool reference, uint64_t& workspace_bytes) const override;
};

std::vector<ParamSpec> RocmGemm::params(const TemplateRequest&) const {
  return {{"block_m", "int", ints({32, 64, 128, 256}), 64, "rows of C per workgroup"},
          {"block_n", "int", ints({32, 64, 128, 256}), 64, "columns of C per workgroup"},
          {"block_k", "int", ints({8, 16, 32}), 16, "depth of an LDS tile"},
          {"warps", "int", ints({1, 2, 4}), 4, "wavefronts per workgroup (2 x warps/2 from 2 on)"}};
}

std::vector<json> RocmGemm::default_choices(const TemplateRequest&) const {
  std::vector<json> out;
  for (auto [bm, bn, bk, w] : std::vector<std::tuple<int, int, int, int>>{{64, 64, 16, 4}, {128, 128, 16, 4}, {128, 64, 16, 4}, {64, 128, 32, 4}}) {
    out.push_back({{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"warps", w}});
  }
  return out;
}

void RocmGemm::check(const TemplateRequest& r, const GemmProblem& g, Problems& p) const {
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

std::string RocmGemm::render(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig, const EpilogueCode& ep,
                             bool reference, uint64_t&) const {
  if (reference) return render_reference_gpu(req, p, sig, ep, "hipGetLastError() == hipSuccess");
  static const KernelFile& kernel = kernel_file("gemm/rocm.hip");
  const auto& q = req.spec.params;
  Subst s;
  set_problem(s, p);
  s.set("bm", q["block_m"].get<int>()).set("bn", q["block_n"].get<int>()).set("bk", q["block_k"].get<int>());
  s.set("warps", q["warps"].get<int>());
  s.set("A", sig.arg(0)).set("B", sig.arg(1)).set("C", sig.out_arg());
  s.set("EPARGS", ep.args).set("EPPARAMS", ep.params);
  s.set("DECL", sig.declaration()).set("NULLCHECKS", sig.null_checks("  "));
  s.set("a_kfast", std::string(p.sAk == 1 ? "true" : "false")).set("b_kfast", std::string(p.sBk == 1 && p.sBn != 1 ? "true" : "false"));
  const char* step = "step_f32";
  // CDNA 3 (gfx940, gfx941, gfx942: MI300) and CDNA 4 (gfx950: MI350) keep these builtins.
  const std::string cdna3 = "defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__)";
  std::string cond = "defined(__gfx908__) || defined(__gfx90a__) || " + cdna3;
  if (p.ab == Dtype::kFloat16) step = "step_f16";
  if (p.ab == Dtype::kBFloat16) {
    step = "step_bf16";
    cond = "defined(__gfx90a__) || " + cdna3;  // the _1k bf16 MFMA starts with gfx90a
  }
  s.set("mfma_cond", cond);
  std::ostringstream src;
  src << prelude(req.backend) << "\nnamespace {\n" << problem_constants(s, p)
      << "using T = " << element_ctype(req.backend, p.ab) << ";\nusing TC = " << element_ctype(req.backend, p.out) << ";\n"
      << ep.function << s.apply(kernel.section("head")) << kernel.section(step) << s.apply(kernel.section("kernel"));
  return src.str();
}

}  // namespace

const GemmBackend& gemm_rocm_backend() {
  static const RocmGemm backend;
  return backend;
}

}  // namespace kforge::core::templates
