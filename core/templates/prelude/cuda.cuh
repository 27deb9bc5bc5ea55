// The prelude of every rendered cuda kernel (prelude() in core/templates/kernel.cpp): the
// includes, PT_EXPORT, KF_HD and the element conversions kf_to_float / kf_store. The kernel
// files of core/templates/gemm/ include it to compile on their own. The renderer takes the
// `@section` block as it is (docs/TEMPLATES.md, "Kernel files").
//   nvcc -std=c++17 -arch=sm_80 -x cu -c cuda.cuh -o /dev/null
// @section prelude
// Rendered by kforge. Tensors are addressed through the strides and offsets baked in below.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstddef>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
#define KF_HD __device__ __forceinline__
__device__ __forceinline__ float kf_to_float(half v) { return __half2float(v); }
__device__ __forceinline__ void kf_store(half* p, float f) { *p = __float2half_rn(f); }
__device__ __forceinline__ float kf_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void kf_store(__nv_bfloat16* p, float f) { *p = __float2bfloat16_rn(f); }
__device__ __forceinline__ float kf_to_float(float v) { return v; }
__device__ __forceinline__ float kf_to_float(double v) { return float(v); }
__device__ __forceinline__ void kf_store(float* p, float f) { *p = f; }
__device__ __forceinline__ void kf_store(double* p, float f) { *p = double(f); }
// @end prelude
