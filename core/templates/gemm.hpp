// The `gemm` template: out = epilogue(A @ B), batched when the output has rank 3.
// A is inputs[0] ([M,K] or [B,M,K]), B is inputs[1] ([K,N] or [B,K,N]); any stride
// order, storage offsets, float32/float16/bfloat16, accumulation in float32. The other
// inputs feed the epilogue (`add`/`mul`), broadcast against [B,M,N] like torch.
// Backends: cpu (packed, cache-blocked, vectorized, OpenMP), cuda (on sm_90a, warp-specialized
// wgmma fed by TMA; elsewhere mma.sync tensor cores with a cp.async multi-stage pipeline for
// 16-bit types; SIMT for float32), rocm (MFMA on gfx908/gfx90a/gfx94x/gfx950, a plain
// LDS-tiled kernel elsewhere). render(reference=true) gives the naive one-output-per-thread
// kernel that verification trusts. The template (gemm.cpp) hands each backend its part through
// gemm_backend.hpp; the kernel text is in core/templates/gemm/ (docs/TEMPLATES.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/templates/kernel.hpp"
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

// gemm_problem.cpp. The spec's shapes must have been checked (or come from a checked request).
GemmProblem gemm_problem(const TemplateSpec& spec);

// The template, for the registry's table (builtin.cpp).
std::unique_ptr<Template> make_gemm_template();

}  // namespace kforge::core::templates
