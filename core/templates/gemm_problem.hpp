// The gemm problem: a checked gemm request as the template, its backends (gemm_backend.hpp)
// and the benchmark (core/bench/bench.cpp, for the vendor library's call) read it, as numbers.
#pragma once

#include <cstdint>

#include "core/templates/template.hpp"

namespace kforge::core::templates {

// A checked gemm request in the form the renderers use: everything as numbers.
struct GemmProblem {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  Dtype ab = Dtype::kFloat32, out = Dtype::kFloat32;
  // Element strides; batch strides are 0 where an operand is shared by every batch.
  int64_t sAb = 0, sAm = 0, sAk = 0, offA = 0;
  int64_t sBb = 0, sBk = 0, sBn = 0, offB = 0;
  int64_t sCb = 0, sCm = 0, sCn = 0, offC = 0;
  bool rank3 = false;
  bool any_m = false;  // the kernel takes M as an argument: GemmBackend::runtime_m(), set by the template's render()
};

// The spec's shapes must have been checked (or come from a checked request).
GemmProblem gemm_problem(const TemplateSpec& spec);

}  // namespace kforge::core::templates
