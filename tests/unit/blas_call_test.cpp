// The vendor baselines' plumbing, checked without a GPU: the column-major call that cuBLAS and
// rocBLAS are given for a row-major problem (core/bench/runner/blas_call.hpp), computed here by
// the column-major BLAS definition and compared with the row-major product; and which targets a
// rocBLAS installation has kernels for (core/bench/runner/rocblas_kernels.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "core/bench/runner/blas_call.hpp"
#include "core/bench/runner/rocblas_kernels.hpp"
#include "unit/scratch.hpp"

namespace kforge::runner {
namespace {

// What a strided batched gemm of a column-major BLAS computes (beta = 0):
// C[i + j*ldc] = sum_p op(A)(i, p) * op(B)(p, j), op(X)(r, c) = X[r + c*ld] or, transposed, X[c + r*ld].
void column_major_gemm(const ColumnMajorCall& c) {
  const auto* a = static_cast<const float*>(c.a);
  const auto* b = static_cast<const float*>(c.b);
  auto* out = static_cast<float*>(c.c);
  for (int64_t batch = 0; batch < c.batch; ++batch) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const float x = a[batch * c.stride_a + (c.trans_a ? p + i * c.lda : i + p * c.lda)];
          const float y = b[batch * c.stride_b + (c.trans_b ? j + p * c.ldb : p + j * c.ldb)];
          acc += double(x) * y;
        }
        out[batch * c.stride_c + i + j * c.ldc] = float(acc);
      }
    }
  }
}

struct Layout {
  const char* what;
  bool a_transposed, b_transposed;  // A stored as [K,M] (sAm == 1), B as [N,K] (sBk == 1)
  int64_t pad;                      // extra elements per row of C (ldc > N)
};

class BlasCall : public ::testing::TestWithParam<Layout> {};

// Every layout the gemm template's inputs can have with a unit stride, batched, with a padded C:
// the library's call computes exactly C = A @ B of the row-major problem.
TEST_P(BlasCall, TheLibrarysCallComputesTheRowMajorProduct) {
  const Layout l = GetParam();
  const int64_t M = 5, N = 7, K = 3, B = 2;
  VendorGemm g;
  g.M = M, g.N = N, g.K = K, g.batch = B;
  g.sAb = M * K + 4, g.sBb = K * N + 2;  // batches apart by more than a matrix
  g.sAm = l.a_transposed ? 1 : K, g.sAk = l.a_transposed ? M : 1;
  g.sBk = l.b_transposed ? 1 : N, g.sBn = l.b_transposed ? K : 1;
  g.sCm = N + l.pad, g.sCn = 1, g.sCb = M * (N + l.pad);
  std::vector<float> a(B * g.sAb), b(B * g.sBb), c(B * g.sCb, NAN);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (auto& x : a) x = normal(rng);
  for (auto& x : b) x = normal(rng);
  g.A = a.data(), g.B = b.data(), g.C = c.data();
  std::string why;
  const auto call = column_major_call(g, "rocBLAS", why);
  ASSERT_TRUE(call) << why;
  column_major_gemm(*call);
  for (int64_t bt = 0; bt < B; ++bt) {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double want = 0;
        for (int64_t k = 0; k < K; ++k)
          want += double(a[bt * g.sAb + m * g.sAm + k * g.sAk]) * b[bt * g.sBb + k * g.sBk + n * g.sBn];
        EXPECT_NEAR(c[bt * g.sCb + m * g.sCm + n], want, 1e-5) << l.what << " at " << bt << "," << m << "," << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, BlasCall,
                         ::testing::Values(Layout{"A row-major, B row-major", false, false, 0},
                                           Layout{"A transposed, B row-major", true, false, 0},
                                           Layout{"A row-major, B transposed", false, true, 3},
                                           Layout{"both transposed, C padded", true, true, 5}));

TEST(BlasCall, ProblemsTheLibraryCannotTakeAreRefusedWithTheReason) {
  VendorGemm g;
  g.M = 4, g.N = 4, g.K = 4;
  g.sAm = 4, g.sAk = 1, g.sBk = 4, g.sBn = 1, g.sCm = 4, g.sCn = 1;
  std::string why;
  EXPECT_TRUE(column_major_call(g, "rocBLAS", why));
  auto bad = g;
  bad.out_dtype = core::Dtype::kFloat16;
  EXPECT_FALSE(column_major_call(bad, "rocBLAS", why));
  EXPECT_EQ(why, "rocBLAS baseline is timed with the output in the input dtype");
  bad = g;
  bad.sCn = 4, bad.sCm = 1;
  EXPECT_FALSE(column_major_call(bad, "rocBLAS", why));
  EXPECT_EQ(why, "C is not row-major");
  bad = g;
  bad.sAk = 2, bad.sAm = 8;
  EXPECT_FALSE(column_major_call(bad, "rocBLAS", why));
  EXPECT_EQ(why, "A has no unit stride");
  bad = g;
  bad.sBn = 2, bad.sBk = 8;
  EXPECT_FALSE(column_major_call(bad, "rocBLAS", why));
  EXPECT_EQ(why, "B has no unit stride");
}

// Debian 13's librocblas0 (rocBLAS 2.47.0): kernels for gfx803 ... gfx90a and RDNA, none for
// gfx942, in the non-lazy layout; AMD's packages use per-target lazy files.
TEST(RocblasKernels, TheTargetsItsTensileLibraryCovers) {
  testing::Scratch lib;
  const auto dir = lib / "rocblas" / "2.47.0" / "library";
  std::filesystem::create_directories(dir);
  for (const char* f : {"Kernels.so-000-gfx90a-xnack+.hsaco", "Kernels.so-000-gfx90a-xnack-.hsaco",
                        "Kernels.so-000-gfx1100.hsaco", "Kernels.so-000-gfx908.hsaco", "TensileLibrary.dat"})
    std::ofstream(dir / f) << "x";
  std::ofstream(lib / "librocblas.so.0.1") << "ELF";
  std::filesystem::create_symlink("librocblas.so.0.1", lib / "librocblas.so.0");
  EXPECT_EQ(rocblas_kernels_dir(lib / "librocblas.so.0", "2.47.0", nullptr), dir);
  EXPECT_EQ(rocblas_kernels_dir(lib / "librocblas.so.0", "2.47.0", "/elsewhere"), "/elsewhere");
  EXPECT_EQ(rocblas_kernels_dir(lib / "librocblas.so.0", "3.0.0", ""), lib / "rocblas" / "library");
  const auto archs = rocblas_kernel_archs(dir);
  EXPECT_EQ(archs, (std::vector<std::string>{"gfx1100", "gfx908", "gfx90a"}));
  EXPECT_EQ(rocblas_lacks(archs, "gfx90a", "2.47.0", dir), "");
  const std::string why = rocblas_lacks(archs, "gfx942", "2.47.0", dir);
  EXPECT_NE(why.find("rocBLAS 2.47.0 has no kernels for gfx942 in " + dir.string() + " (it has: gfx1100 gfx908 gfx90a)"),
            std::string::npos)
      << why;
  EXPECT_NE(rocblas_lacks({}, "gfx90a", "2.47.0", lib / "none").find("no kernel library there"), std::string::npos);

  testing::Scratch lazy;
  for (const char* f : {"TensileLibrary_lazy_gfx942.dat", "TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_gfx942.co",
                        "TensileLibrary_lazy_gfx90a.dat"})
    std::ofstream(lazy / f) << "x";
  EXPECT_EQ(rocblas_kernel_archs(lazy.path()), (std::vector<std::string>{"gfx90a", "gfx942"}));
}

}  // namespace
}  // namespace kforge::runner
