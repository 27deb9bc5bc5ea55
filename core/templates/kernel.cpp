#include "core/templates/kernel.hpp"

#include <sstream>

#include "core/templates/kernel_file.hpp"

namespace kforge::core::templates {

std::string element_ctype(Backend backend, Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32: return "float";
    case Dtype::kFloat64: return "double";
    case Dtype::kInt8: return "int8_t";
    case Dtype::kUInt8: return "uint8_t";
    case Dtype::kInt32: return "int32_t";
    case Dtype::kInt64: return "int64_t";
    case Dtype::kFloat16: return backend == Backend::kCuda ? "half" : "_Float16";
    case Dtype::kBFloat16:
      return backend == Backend::kCuda ? "__nv_bfloat16" : backend == Backend::kRocm ? "hip_bfloat16" : "bfloat16";
  }
  return "float";
}

std::string prelude(Backend backend) {
  switch (backend) {
    case Backend::kCpu: return kernel_file("prelude/cpu.inc").section("prelude");
    case Backend::kCuda: return kernel_file("prelude/cuda.cuh").section("prelude");
    case Backend::kRocm: return kernel_file("prelude/rocm.hip").section("prelude");
  }
  return {};
}

KernelSignature::KernelSignature(const TemplateRequest& req, std::vector<ScalarArg> scalars) : req_(req) {
  const auto& spec = req.spec;
  names_.resize(spec.inputs.size());
  abi_.symbol = std::string(kKernelNamePlaceholder);
  for (int idx : spec.input_reorder) {
    const TensorMeta& t = spec.inputs[static_cast<size_t>(idx)];
    // Parameters are named as Inductor names them (in_ptr0, ..., out_ptr0), never after
    // the tensors: a tensor called `b` or `M` must not shadow the kernel's own locals.
    names_[static_cast<size_t>(idx)] = "in_ptr" + std::to_string(abi_.args.size());
    AbiArg a;
    a.name = names_[static_cast<size_t>(idx)];
    a.kind = ArgKind::kTensor;
    a.ctype = "const " + element_ctype(req.backend, t.dtype) + "*";
    a.binds = t.name;
    a.dtype = t.dtype;
    a.is_const = true;
    a.layout = AbiArg::Layout{t.sizes, std::vector<std::string>(t.rank()), t.strides, t.offset};
    abi_.args.push_back(a);
  }
  out_name_ = "out_ptr0";
  AbiArg o;
  o.name = out_name_;
  o.kind = ArgKind::kTensor;
  o.ctype = element_ctype(req.backend, spec.output.dtype) + "*";
  o.binds = spec.output.name;
  o.dtype = spec.output.dtype;
  o.layout = AbiArg::Layout{spec.output.sizes, std::vector<std::string>(spec.output.rank()), spec.output.strides,
                            spec.output.offset};
  abi_.args.push_back(o);
  for (const auto& s : scalars) {
    AbiArg a;
    a.name = s.name;
    a.kind = ArgKind::kScalar;
    a.ctype = s.ctype;
    a.value = s.value;
    abi_.args.push_back(a);
  }
  auto tail = [&](const char* name, ArgKind kind, std::string ctype) {
    AbiArg a;
    a.name = name;
    a.kind = kind;
    a.ctype = std::move(ctype);
    abi_.args.push_back(a);
  };
  tail("workspace_size", ArgKind::kWorkspaceSize, "size_t*");
  tail("workspace", ArgKind::kWorkspace, "uint8_t*");
  tail("stream", ArgKind::kStream, std::string(stream_ctype(req.backend)));
}

std::string KernelSignature::declaration() const {
  std::ostringstream s;
  s << "PT_EXPORT int " << kKernelNamePlaceholder << "(";
  for (size_t i = 0; i < abi_.args.size(); ++i) {
    s << (i ? ",\n    " : "") << abi_.args[i].ctype << " " << abi_.args[i].name;
  }
  s << ")";
  return s.str();
}

std::string KernelSignature::arg(int input) const { return names_.at(static_cast<size_t>(input)); }
std::string KernelSignature::out_arg() const { return out_name_; }

std::string KernelSignature::null_checks(const std::string& indent) const {
  std::ostringstream s;
  for (const auto& a : abi_.args) {
    if (a.kind == ArgKind::kTensor) s << indent << "if (" << a.name << " == nullptr) return 1;  // non-empty tensor\n";
  }
  return s.str();
}

std::string offset_expr(const TensorMeta& t, const std::vector<std::string>& idx) {
  std::ostringstream s;
  s << "(int64_t(" << t.offset << ")";
  for (size_t i = 0; i < t.rank() && i < idx.size(); ++i) {
    if (t.sizes[i] == 1 || t.strides[i] == 0) continue;
    s << " + int64_t(" << idx[i] << ") * " << t.strides[i];
  }
  s << ")";
  return s.str();
}

}  // namespace kforge::core::templates
