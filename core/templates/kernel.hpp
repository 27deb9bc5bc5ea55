// Helpers a template uses while rendering, as Inductor's TemplateKernel has them: the
// kernel signature from inputs, output, extra scalars and input_reorder; C names for
// tensors; size expressions over a tensor's dimensions; the null-pointer checks a kernel
// makes before touching a tensor; and the prelude per backend (PT_EXPORT, dtype aliases,
// includes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/base/abi.hpp"
#include "core/base/tensor.hpp"
#include "core/templates/template.hpp"

namespace kforge::core::templates {

// The C element type a backend uses for a dtype ("half", "__nv_bfloat16", "_Float16", ...).
std::string element_ctype(Backend backend, Dtype dtype);
// Includes, PT_EXPORT and dtype helpers (kf_to_float / kf_store) for a backend: the kernel
// files prelude/cpu.inc, prelude/cuda.cuh, prelude/rocm.hip.
std::string prelude(Backend backend);

struct ScalarArg {
  std::string name;
  std::string ctype = "int64_t";
  std::optional<int64_t> value;  // fixed by the rendering; none: the kernel takes any value at run time
};

class KernelSignature {
 public:
  // Tensors in input_reorder order, then the output, then the scalars, then the
  // workspace and stream arguments.
  KernelSignature(const TemplateRequest& req, std::vector<ScalarArg> scalars);

  const Abi& abi() const { return abi_; }
  // "PT_EXPORT int KERNEL_NAME(const float* A, ...)"
  std::string declaration() const;
  // The C parameter name for input i (by its position in spec.inputs), or the output.
  std::string arg(int input) const;
  std::string out_arg() const;
  // `if (A == nullptr && numel > 0) return 1;` for every tensor.
  std::string null_checks(const std::string& indent) const;

 private:
  const TemplateRequest& req_;
  Abi abi_;
  std::vector<std::string> names_;  // per input index
  std::string out_name_;
};

// "(2 * 512 + 3 * 1)": the element offset of index expressions over a tensor's strides,
// dropping size-1 dims. idx[i] is the C expression for dimension i.
std::string offset_expr(const TensorMeta& t, const std::vector<std::string>& idx);

}  // namespace kforge::core::templates
