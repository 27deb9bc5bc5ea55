#include "core/templates/kernel.hpp"

#include <sstream>

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
  std::ostringstream s;
  s << "// Rendered by kforge. Tensors are addressed through the strides and offsets baked in below.\n";
  const char* fn = "static inline";
  switch (backend) {
    case Backend::kCpu:
      s << "#include <algorithm>\n#include <cmath>\n#include <cstddef>\n#include <cstdint>\n#include <cstdlib>\n"
           "#include <cstring>\n#include <immintrin.h>\n#include <omp.h>\n"
           "#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
           "#define KF_HD\n"
           "struct bfloat16 { uint16_t bits; };  // bfloat16 storage\n"
           "static inline float kf_to_float(bfloat16 v) { uint32_t u = uint32_t(v.bits) << 16; float f; std::memcpy(&f, &u, 4); return f; }\n"
           "static inline void kf_store(bfloat16* p, float f) {\n"
           "  uint32_t u; std::memcpy(&u, &f, 4);\n"
           "  if ((u & 0x7fffffffu) > 0x7f800000u) { p->bits = uint16_t((u >> 16) | 0x40); return; }  // quiet NaN\n"
           "  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even\n"
           "  p->bits = uint16_t(u >> 16);\n"
           "}\n"
           "static inline float kf_to_float(_Float16 v) { return float(v); }\n"
           "static inline void kf_store(_Float16* p, float f) { *p = _Float16(f); }\n";
      break;
    case Backend::kCuda:
      fn = "__device__ __forceinline__";
      s << "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cstddef>\n#include <cstdint>\n"
           "#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
           "#define KF_HD __device__ __forceinline__\n"
           "__device__ __forceinline__ float kf_to_float(half v) { return __half2float(v); }\n"
           "__device__ __forceinline__ void kf_store(half* p, float f) { *p = __float2half_rn(f); }\n"
           "__device__ __forceinline__ float kf_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }\n"
           "__device__ __forceinline__ void kf_store(__nv_bfloat16* p, float f) { *p = __float2bfloat16_rn(f); }\n";
      break;
    case Backend::kRocm:
      fn = "__device__ __forceinline__";
      s << "#include <hip/hip_runtime.h>\n#include <hip/hip_bfloat16.h>\n#include <cstddef>\n#include <cstdint>\n"
           "#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
           "#define KF_HD __device__ __forceinline__\n"
           "__device__ __forceinline__ float kf_to_float(_Float16 v) { return float(v); }\n"
           "__device__ __forceinline__ void kf_store(_Float16* p, float f) { *p = _Float16(f); }\n"
           "__device__ __forceinline__ float kf_to_float(hip_bfloat16 v) { return float(v); }\n"
           "__device__ __forceinline__ void kf_store(hip_bfloat16* p, float f) { *p = hip_bfloat16(f); }\n";
      break;
  }
  s << fn << " float kf_to_float(float v) { return v; }\n"
    << fn << " float kf_to_float(double v) { return float(v); }\n"
    << fn << " void kf_store(float* p, float f) { *p = f; }\n"
    << fn << " void kf_store(double* p, float f) { *p = double(f); }\n";
  return s.str();
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
