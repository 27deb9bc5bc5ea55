// The gemm template: what every backend shares (the parameter specs' checks, the shapes, the
// problem, the signature, the epilogue), and the table of backends, which own the rest
// (gemm_backend.hpp).
#include <algorithm>
#include <array>
#include <set>
#include <sstream>

#include "core/templates/gemm.hpp"
#include "core/templates/gemm_backend.hpp"

namespace kforge::core::templates {
namespace {

using nlohmann::json;

bool is_float(Dtype d) { return d == Dtype::kFloat32 || d == Dtype::kFloat16 || d == Dtype::kBFloat16; }

std::string dims(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The backends, by the request's.
const GemmBackend& backend_of(Backend b) {
  switch (b) {
    case Backend::kCpu: return gemm_cpu_backend();
    case Backend::kCuda: return gemm_cuda_backend();
    case Backend::kRocm: return gemm_rocm_backend();
  }
  return gemm_cpu_backend();
}

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

// The epilogue as C++, shared by every backend. The reference rendering's is the plain formula
// of every op (erff for gelu); a tuned kernel's gelu is its backend's, where it has one.
EpilogueCode gemm_epilogue(const TemplateRequest& req, const KernelSignature& sig, const GemmBackend& backend, bool reference) {
  const auto& spec = req.spec;
  EpilogueCode code;
  // A tuned kernel's gelus, where its backend has its own (cuda: gemm/gelu.cuh); the reference
  // keeps the formulas.
  const std::string gelu_erf = reference ? "" : backend.gelu_function(false);
  const std::string gelu_tanh = reference ? "" : backend.gelu_function(true);
  const std::string gelu_tanh2 = reference || gelu_tanh.empty() ? "" : backend.gelu_pair_function();
  std::set<int> declared;
  const TensorMeta& c = spec.output;
  for (const auto& op : spec.epilogue) {
    if (op.input >= 0 && declared.insert(op.input).second) {
      const TensorMeta& t = spec.inputs[static_cast<size_t>(op.input)];
      code.params += ", const " + element_ctype(req.backend, t.dtype) + "* __restrict__ " + sig.arg(op.input);
      code.args += ", " + sig.arg(op.input);
    }
  }
  // One output's op: `v` the value, at output coordinates named `at` (batch, row, column).
  using Names = std::array<std::string, 3>;
  auto operand = [&](int input, const Names& at) {
    const TensorMeta& t = spec.inputs[static_cast<size_t>(input)];
    std::vector<std::string> idx(at.end() - static_cast<long>(t.rank()), at.end());
    if (c.rank() == 2 && t.rank() == 3) idx.assign(at.begin(), at.end());  // cannot happen after check()
    return "kf_to_float(" + sig.arg(input) + "[" + offset_expr(t, idx) + "])";
  };
  auto tuned_gelu = [&](const EpilogueOp& op, bool tanh) {
    return op.op == "gelu" && op.tanh_approx == tanh && !(tanh ? gelu_tanh : gelu_erf).empty();
  };
  auto statement = [&](const EpilogueOp& op, const std::string& v, const Names& at) -> std::string {
    if (op.op == "add") return v + " = " + v + " + " + operand(op.input, at) + ";";
    if (op.op == "mul") return v + " = " + v + " * " + operand(op.input, at) + ";";
    if (op.op == "scale") return v + " = " + v + " * " + std::to_string(op.value) + "f;";
    if (op.op == "relu") return v + " = " + v + " > 0.0f ? " + v + " : 0.0f;";
    if (op.op == "sigmoid") return v + " = 1.0f / (1.0f + expf(-" + v + "));";
    if (op.op == "silu") return v + " = " + v + " / (1.0f + expf(-" + v + "));";
    if (op.op == "tanh") return v + " = tanhf(" + v + ");";
    if (tuned_gelu(op, true)) return v + " = kf_gelu_tanh(" + v + ");";
    if (op.op == "gelu" && op.tanh_approx)
      return v + " = 0.5f * " + v + " * (1.0f + tanhf(0.7978845608028654f * (" + v + " + 0.044715f * " + v + " * " + v + " * " + v + ")));";
    if (tuned_gelu(op, false)) return v + " = kf_gelu_erf(" + v + ");";
    if (op.op == "gelu") return v + " = 0.5f * " + v + " * (1.0f + erff(" + v + " * 0.7071067811865476f));";
    if (op.op == "cast") return "{ " + element_ctype(req.backend, op.dtype) + " r; kf_store(&r, " + v + "); " + v + " = kf_to_float(r); }";
    return "";
  };
  const Names first = {"b", "m", "n"}, second = {"b", "m1", "n1"};
  std::ostringstream body, pair;
  for (const auto& op : spec.epilogue) {
    body << "  " << statement(op, "v", first) << "  // " << op.op << "\n";
    // The pair: each op on both outputs, but a tuned tanh gelu of two at once.
    if (tuned_gelu(op, true) && !gelu_tanh2.empty()) pair << "  kf_gelu_tanh2(v0, v1);";
    else pair << "  " << statement(op, "v0", first) << " " << statement(op, "v1", second);
    pair << "  // " << op.op << "\n";
  }
  auto calls = [&](bool tanh) { return std::ranges::any_of(spec.epilogue, [&](const EpilogueOp& op) { return tuned_gelu(op, tanh); }); };
  const std::string gelus = (calls(false) ? gelu_erf : "") + (calls(true) ? gelu_tanh : "");
  auto defined = [&](const std::string& coordinates) {  // kf_epilogue, its output coordinates in that order
    return "KF_HD float kf_epilogue(float v, " + coordinates + code.params + ") {\n" + "  (void)b; (void)m; (void)n;\n" + body.str() +
           "  return v;\n}\n";
  };
  // kf_epilogue2: two outputs at once, the second at (m1, n1), for kernels that store outputs in pairs.
  const std::string pair_gelus = calls(true) ? gelu_tanh2 : "";
  auto defined_pair = [&](const std::string& coordinates) {
    return pair_gelus + "KF_HD void kf_epilogue2(float& v0, float& v1, " + coordinates + code.params + ") {\n" +
           "  (void)b; (void)m; (void)n; (void)m1; (void)n1;\n" + pair.str() + "}\n";
  };
  code.function = gelus + defined("int64_t b, int64_t m, int64_t n");
  code.swapped = gelus + defined("int64_t b, int64_t n, int64_t m");
  code.pair = defined_pair("int64_t b, int64_t m, int64_t n, int64_t m1, int64_t n1");
  code.pair_swapped = defined_pair("int64_t b, int64_t n, int64_t m, int64_t n1, int64_t m1");
  return code;
}

class GemmTemplate final : public Template {
 public:
  std::string name() const override { return "gemm"; }
  std::string description() const override;
  std::vector<ParamSpec> params(const TemplateRequest& req) const override { return backend_of(req.backend).params(req); }
  std::vector<json> default_choices(const TemplateRequest& req) const override { return backend_of(req.backend).default_choices(req); }
  Result<void> check(TemplateRequest& req) const override;
  Result<Rendered> render(const TemplateRequest& req, bool reference) const override;
};

std::string GemmTemplate::description() const {
  return "out = epilogue(A @ B): A is inputs[0] ([M,K] or [B,M,K]), B is inputs[1] ([K,N] or [B,K,N]), any strides; "
         "float32/float16/bfloat16 with float32 accumulation; epilogue ops add/mul (inputs[2..], broadcast), scale, relu, "
         "gelu (erf or tanh), silu, sigmoid, tanh, cast.";
}

Result<void> GemmTemplate::check(TemplateRequest& req) const {
  const GemmBackend& backend = backend_of(req.backend);
  const bool no_params = !req.spec.params.is_object() || req.spec.params.empty();
  backend.complete_params(req.spec.params);
  if (auto r = apply_param_specs(backend.params(req), req.spec.params); !r) return r;
  Problems p;
  check_shapes(req.spec, p);
  if (!p.list.empty()) return p.result();
  const GemmProblem g = gemm_problem(req.spec);
  if (no_params) backend.choose_params(req, g);
  backend.check(req, g, p);
  return p.result();
}

Result<Rendered> GemmTemplate::render(const TemplateRequest& req, bool reference) const {
  const GemmBackend& backend = backend_of(req.backend);
  GemmProblem g = gemm_problem(req.spec);
  g.any_m = backend.runtime_m(req, g);
  KernelSignature sig(req, {{"M", "int64_t", g.any_m ? std::nullopt : std::optional<int64_t>(g.M)},
                            {"N", "int64_t", g.N}, {"K", "int64_t", g.K}, {"batch", "int64_t", g.batch}});
  const EpilogueCode ep = gemm_epilogue(req, sig, backend, reference);
  Rendered out;
  uint64_t workspace = 0;
  out.source = backend.render(req, g, sig, ep, reference, workspace);
  out.family = reference ? "gemm_ref" : "gemm";
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

}  // namespace

std::unique_ptr<Template> make_gemm_template() { return std::make_unique<GemmTemplate>(); }

}  // namespace kforge::core::templates
