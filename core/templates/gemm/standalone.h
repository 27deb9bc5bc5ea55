// What a gemm renderer writes between the prelude and a kernel file (problem_constants() in
// render_util.cpp, the epilogue of gemm_epilogue() in gemm.cpp), for compiling a kernel file of
// this folder on its own: a 256 x 256 x 256 problem, row-major operands, no epilogue (one output
// at a time, and two: kf_epilogue2, which the wgmma kernel calls). Never
// rendered; each kernel file includes it inside the anonymous namespace its text closes.
constexpr int64_t kM = 256, kN = 256, kK = 256, kBatch = 1;
constexpr int64_t sAb = 0, sAm = 256, sAk = 1, offA = 0;  // A[b][m][k]
constexpr int64_t sBb = 0, sBk = 256, sBn = 1, offB = 0;  // B[b][k][n]
constexpr int64_t sCb = 0, sCm = 256, sCn = 1, offC = 0;  // C[b][m][n]
KF_HD float kf_epilogue(float v, int64_t b, int64_t m, int64_t n) {
  (void)b; (void)m; (void)n;
  return v;
}
KF_HD void kf_epilogue2(float& v0, float& v1, int64_t b, int64_t m, int64_t n, int64_t m1, int64_t n1) {
  (void)v0; (void)v1; (void)b; (void)m; (void)n; (void)m1; (void)n1;
}
