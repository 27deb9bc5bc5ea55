// The prelude of every rendered rocm kernel (prelude() in core/templates/kernel.cpp): the
// includes, PT_EXPORT, KF_HD and the element conversions kf_to_float / kf_store. The kernel
// files of core/templates/gemm/ include it to compile on their own. The renderer takes the
// `@section` block as it is (docs/TEMPLATES.md, "Kernel files").
//   hipcc -std=c++17 --offload-arch=gfx90a -x hip -c rocm.hip -o /dev/null
// @section prelude
// Rendered by kforge. Tensors are addressed through the strides and offsets baked in below.
#include <hip/hip_runtime.h>
#include <hip/hip_bfloat16.h>
#include <cstddef>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
#define KF_HD __device__ __forceinline__
__device__ __forceinline__ float kf_to_float(_Float16 v) { return float(v); }
__device__ __forceinline__ void kf_store(_Float16* p, float f) { *p = _Float16(f); }
__device__ __forceinline__ float kf_to_float(hip_bfloat16 v) { return float(v); }
__device__ __forceinline__ void kf_store(hip_bfloat16* p, float f) { *p = hip_bfloat16(f); }
__device__ __forceinline__ float kf_to_float(float v) { return v; }
__device__ __forceinline__ float kf_to_float(double v) { return float(v); }
__device__ __forceinline__ void kf_store(float* p, float f) { *p = f; }
__device__ __forceinline__ void kf_store(double* p, float f) { *p = double(f); }
// @end prelude
