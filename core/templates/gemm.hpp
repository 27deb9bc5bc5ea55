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

#include <memory>

#include "core/templates/template.hpp"

namespace kforge::core::templates {

// The template, for the registry's table (builtin.cpp).
std::unique_ptr<Template> make_gemm_template();

}  // namespace kforge::core::templates
