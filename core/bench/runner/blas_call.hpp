// How a column-major BLAS (cuBLAS, cuBLASLt, rocBLAS) computes the runner's row-major GEMM:
// C^T = B^T A^T, so the library's (N x M) output is op(B) op(A). column_major_call() gives the
// arguments of a strided batched gemm call in the library's order (its A is our B), or nullopt
// with the reason where the library cannot take the problem as it is laid out: C not row-major,
// an operand without a unit stride, or an output dtype other than the inputs' (the baseline is
// timed in the kernel's own dtypes). Header-only and pure: the unit tests check it against a
// row-major reference without a GPU (tests/unit/blas_call_test.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "core/bench/runner/device.hpp"

namespace kforge::runner {

struct ColumnMajorCall {
  bool trans_a = false, trans_b = false;  // op(A), op(B) in the library's terms
  int64_t m = 0, n = 0, k = 0;            // the library's m x n output is our N x M
  const void* a = nullptr;                // our B
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;  // our A
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};

inline std::optional<ColumnMajorCall> column_major_call(const VendorGemm& g, const std::string& library,
                                                        std::string& why) {
  if (g.dtype != g.out_dtype) {
    why = library + " baseline is timed with the output in the input dtype";
    return std::nullopt;
  }
  if (!(g.sCn == 1 || g.N == 1)) {
    why = "C is not row-major";
    return std::nullopt;
  }
  ColumnMajorCall c;
  // Our B (K x N) is the library's A: row-major B is a column-major N x K matrix, no transpose.
  if (g.sBn == 1 || g.N == 1) {
    c.trans_a = false;
    c.lda = std::max({g.sBk, g.N, int64_t{1}});
  } else if (g.sBk == 1 || g.K == 1) {
    c.trans_a = true;
    c.lda = std::max({g.sBn, g.K, int64_t{1}});
  } else {
    why = "B has no unit stride";
    return std::nullopt;
  }
  if (g.sAk == 1 || g.K == 1) {
    c.trans_b = false;
    c.ldb = std::max({g.sAm, g.K, int64_t{1}});
  } else if (g.sAm == 1 || g.M == 1) {
    c.trans_b = true;
    c.ldb = std::max({g.sAk, g.M, int64_t{1}});
  } else {
    why = "A has no unit stride";
    return std::nullopt;
  }
  c.m = g.N;
  c.n = g.M;
  c.k = g.K;
  c.a = g.B;
  c.stride_a = g.sBb;
  c.b = g.A;
  c.stride_b = g.sAb;
  c.c = g.C;
  c.ldc = std::max({g.sCm, g.N, int64_t{1}});
  c.stride_c = g.sCb;
  c.batch = g.batch;
  return c;
}

}  // namespace kforge::runner
