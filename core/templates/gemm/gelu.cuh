// The gelus of a tuned cuda gemm: gemm_epilogue() (gemm.cpp) puts the ones an epilogue calls
// in front of kf_epilogue; the reference rendering keeps the plain formulas.
//
// A kernel file (docs/TEMPLATES.md, "Kernel files"): the renderer takes the text of each
// `// @section NAME` ... `// @end NAME` block, keeps the first branch of its
// `#ifdef KFORGE_RENDERED` alternatives, and substitutes `$name$` (a value; a macro defined
// below in a compile on its own) and `/*$name$*/` (generated code, such as the epilogue's
// arguments; nothing in a compile on its own). Everything outside the sections is there only
// so that this file compiles on its own (tests/integration/kernel_files_test.cpp):
//   nvcc -std=c++17 -arch=sm_80 -x cu -c gelu.cuh -o gelu.o
#include "../prelude/cuda.cuh"

// The erf gelu of the CUDA kernels: gelu(x) = x Phi(x) = max(x, 0) - |x| erfc(|x| / sqrt 2) / 2,
// with erfc(z) = t 2^(Q(t) - log2(e) z^2), t = 1 / (1 + 0.387 z) and Q a polynomial of degree 6
// fitted for the smallest largest relative error over z in [0, 11.5] (bench/gelu_fit.py, which
// prints these constants: 1.4e-6; Q less 1 here, so that the one ex2 gives erfc / 2). One rcp,
// one ex2 and 13 others, against 27 for 0.5 x (1 + erff(x / sqrt 2)): the epilogue of a short-K
// gemm is bound by its issue rate. In float its relative error is 1.7e-6 where x > 0, 2.4e-6
// over [-5, 0) and 6.8e-6 over [-12, -5) (the rounding of x^2), where 1 + erff cancels (4.7 %
// and 100 %). |x| is clamped at 16, past which the ex2 is 0, so that gelu(inf) = inf; NaN stays
// NaN and gelu(-inf) = 0, the limit (the erff formula gives NaN). The reference keeps erff.
// @section gelu_erf
__device__ __forceinline__ float kf_gelu_erf(float x) {
  float a, t, e;
#if __CUDA_ARCH__ >= 800
  asm("min.NaN.f32 %0, %1, 0f41800000;" : "=f"(a) : "f"(fabsf(x)));  // 16
#else
  a = fabsf(x) > 16.0f ? 16.0f : fabsf(x);
#endif
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(a, 2.736503243e-01f, 1.0f)));
  float q = 3.779154952e-01f;
  q = fmaf(q, t, -1.265710321e+00f);
  q = fmaf(q, t, 1.184962210e+00f);
  q = fmaf(q, t, -2.867710197e-01f);
  q = fmaf(q, t, 7.618369621e-01f);
  q = fmaf(q, t, 1.421942592e+00f);
  q = fmaf(q, t, -3.194173870e+00f);
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fmaf(a, a * -0.72134752044448170f, q)));
  return fmaf(-a, t * e, fmaxf(x, 0.0f));
}
// @end gelu_erf

// The tanh gelu of a tuned CUDA kernel: 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)) with
// u = sqrt(2 / pi) (x + 0.044715 x^3), so -2u log2(e) = x (c1 + c3 x^2): one ex2, one rcp and 5
// others, and no 1 + tanh(u) that cancels where x < 0. Relative error in float 1.5e-7 where
// x > 0, 1.8e-6 over [-5, 0) and 9.3e-6 over [-10, -5) (the rounding of u) with ex2 and rcp
// correctly rounded (the approx forms add 2-3 ulp), where the tanhf formula's are 1.3e-7, 0.3
// and 1 (bench/gelu_fit.py, which prints c1 and c3). inf gives inf, NaN NaN and -inf NaN, as
// with tanhf; outputs under 2^-120 may be 0 (ftz). The reference keeps the tanhf formula.
// @section gelu_tanh
__device__ __forceinline__ float kf_gelu_tanh(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * fmaf(x * x, -1.029432396e-01f, -2.302208198e+00f)));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0f));
  return x * r;
}
// @end gelu_tanh

// Two tanh gelus that share one rcp, 1 / d0 = d1 / (d0 d1), for the wgmma kernel, whose stores
// take outputs two at a time (emitted after gelu_tanh, with kf_epilogue2). A long tile's
// epilogue is bound by the SFU, which runs ex2 and rcp at a quarter of the FMA rate: two ex2
// and one rcp for two outputs instead of four MUFU operations, for 3 more others an output.
// d1 is scaled by 2^-126 and t clamped at 127, so that d0 d1 is at most 2^128 (inf, where both
// clamp: its rcp is 0). Where d0 d1 passes 2^126 its rcp flushes to 0, and so do both outputs,
// each then under 2^-125 |x|; where t > 126 the single form's rcp is subnormal and flushed,
// and so is the pair's 1 / d0 here (mul.ftz): x = -inf still gives NaN. A NaN or infinite
// partner clamps at 127: it leaves the other output as it is but where that one is under
// 2^-120 and may flush (x below -9.97). Its error: bench/gelu_fit.py.
// @section gelu_tanh2
// kf_gelu_tanh's exponent, clamped.
__device__ __forceinline__ float kf_gelu_tanh_t(float x) { return fminf(x * fmaf(x * x, -1.029432396e-01f, -2.302208198e+00f), 127.0f); }
__device__ __forceinline__ void kf_gelu_tanh2(float& x, float& y) {
  float ex, ey, q, rx, ry;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(ex) : "f"(kf_gelu_tanh_t(x)));
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(ey) : "f"(kf_gelu_tanh_t(y)));
  const float dx = ex + 1.0f, dy = fmaf(ey, 0x1p-126f, 0x1p-126f);  // d1 2^-126, in [2^-126, 2]
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(q) : "f"(dx * dy));
  asm("mul.ftz.f32 %0, %1, %2;" : "=f"(rx) : "f"(dy), "f"(q));      // 1 / d0
  asm("mul.ftz.f32 %0, %1, 0f00800000;" : "=f"(ry) : "f"(dx * q));  // 1 / d1: d0 / (d0 d1 2^-126) 2^-126
  x *= rx;
  y *= ry;
}
// @end gelu_tanh2

// Calls each, so that a compile on its own assembles them.
__global__ void kf_gelu_check(float* x) {
  x[0] = kf_gelu_erf(x[0]);
  x[1] = kf_gelu_tanh(x[1]);
  kf_gelu_tanh2(x[2], x[3]);
}
