// The reference gemm: one output element per loop iteration (cpu) or per thread (cuda, rocm),
// accumulating in double, then the same epilogue. Slow, simple and obviously right:
// verification compares the tuned kernels against it. Kernel files gemm/reference_cpu.inc and
// gemm/reference.cuh (one text for cuda and rocm).
#include <sstream>

#include "core/templates/gemm_backend.hpp"
#include "core/templates/kernel_file.hpp"
#include "core/templates/render_util.hpp"

namespace kforge::core::templates {
namespace {

// The prelude, the problem and the epilogue, then the kernel file's section `reference`.
std::string render_reference(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig, const EpilogueCode& ep,
                             const KernelFile& file, const std::string& launched) {
  Subst s;
  set_problem(s, p);
  s.set("TA", element_ctype(req.backend, p.ab)).set("TC", element_ctype(req.backend, p.out));
  s.set("A", sig.arg(0)).set("B", sig.arg(1)).set("C", sig.out_arg()).set("EPARGS", ep.args).set("EPPARAMS", ep.params);
  s.set("DECL", sig.declaration()).set("NULLCHECKS", sig.null_checks("  ")).set("LAUNCHED", launched);
  std::ostringstream src;
  src << prelude(req.backend) << "\nnamespace {\n" << problem_constants(s, p) << ep.function << s.apply(file.section("reference"));
  return src.str();
}

}  // namespace

std::string render_reference_cpu(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig, const EpilogueCode& ep) {
  static const KernelFile& file = kernel_file("gemm/reference_cpu.inc");
  return render_reference(req, p, sig, ep, file, "");
}

std::string render_reference_gpu(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig, const EpilogueCode& ep,
                                 const std::string& launched) {
  static const KernelFile& file = kernel_file("gemm/reference.cuh");
  return render_reference(req, p, sig, ep, file, launched);
}

}  // namespace kforge::core::templates
