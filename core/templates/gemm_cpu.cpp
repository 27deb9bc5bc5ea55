// The cpu gemm: BLIS-style blocking (jc -> pc -> ic -> jr -> ir), A and B packed into
// contiguous float panels (converting float16/bfloat16 and any strides on the way), an
// MR x NR register-blocked micro-kernel on GCC vector extensions, OpenMP over (ic, jr)
// tasks. When K spans several kc panels, partial sums live in the float32 workspace.
#include <sstream>

#include "core/templates/gemm.hpp"
#include "core/templates/render_util.hpp"

namespace kforge::core::templates {

std::string render_gemm_cpu(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig,
                            const EpilogueCode& ep, uint64_t& workspace_bytes) {
  const auto& q = req.spec.params;
  const int kc = q["kc"];
  workspace_bytes = p.K > kc ? uint64_t(p.M) * uint64_t(p.N) * 4 : 0;
  Subst s;
  s.set("TA", element_ctype(req.backend, p.ab)).set("TC", element_ctype(req.backend, p.out));
  set_problem(s, p);
  for (const char* k : {"mr", "nr", "vec", "mc", "kc", "nc", "threads"}) s.set(k, q[k].get<int>());
  s.set("A", sig.arg(0)).set("B", sig.arg(1)).set("C", sig.out_arg()).set("EPARGS", ep.args);
  s.set("WS", workspace_bytes);
  const int vec = q["vec"];
  s.set("BCAST", vec == 16 ? "_mm512_set1_ps" : vec == 8 ? "_mm256_set1_ps" : "_mm_set1_ps");
  std::ostringstream src;
  src << prelude(req.backend) << "\nnamespace {\n" << problem_constants(s) << s.apply(R"(
constexpr int MR = $mr$, NR = $nr$, VEC = $vec$, MC = $mc$, KC = $kc$, NC = $nc$, THREADS = $threads$;
constexpr int NV = NR / VEC;
constexpr bool kSplitK = kK > KC;
typedef float vf __attribute__((vector_size(VEC * 4)));
// A broadcast straight from memory (vbroadcastss m32): GCC's generic vector splat goes
// through a scalar register and costs a uop per row of the micro-tile.
static inline vf bcast(const float* p) { return (vf)$BCAST$(*p); }
using TA = $TA$;
using TC = $TC$;
)") << ep.function << s.apply(R"(
// A[m0 : m0+mc, k0 : k0+kc] as MR-row panels: for each k, MR consecutive rows (zero-padded).
static void pack_a(const TA* __restrict A, float* __restrict dst, int64_t m0, int64_t mc, int64_t k0, int64_t kc) {
  for (int64_t p = 0; p < mc; p += MR) {
    const int rows = int(mc - p < MR ? mc - p : MR);
    for (int64_t k = 0; k < kc; ++k) {
      const TA* col = A + (k0 + k) * sAk + (m0 + p) * sAm;
      int i = 0;
      for (; i < rows; ++i) dst[i] = kf_to_float(col[i * sAm]);
      for (; i < MR; ++i) dst[i] = 0.0f;
      dst += MR;
    }
  }
}

// B[k0 : k0+kc, n0 : n0+nc] as NR-column panels: for each k, NR consecutive columns.
static void pack_b_panel(const TA* __restrict B, float* __restrict dst, int64_t n0, int64_t cols, int64_t k0, int64_t kc) {
  for (int64_t k = 0; k < kc; ++k) {
    const TA* row = B + (k0 + k) * sBk + n0 * sBn;
    int j = 0;
    if (cols == NR) {
#pragma GCC unroll 8
      for (; j < NR; ++j) dst[j] = kf_to_float(row[j * sBn]);
    } else {
      for (; j < cols; ++j) dst[j] = kf_to_float(row[j * sBn]);
      for (; j < NR; ++j) dst[j] = 0.0f;
    }
    dst += NR;
  }
}

// acc[MR][NR] = a_panel (MR x kc) * b_panel (kc x NR), stored row-major into c.
static inline void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c) {
  vf acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[i][j] = (vf){};
  for (int64_t k = 0; k < kc; ++k) {
    vf bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) __builtin_memcpy(&bv[j], b + j * VEC, sizeof(vf));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const vf av = bcast(a + i);
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
    a += MR;
    b += NR;
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) __builtin_memcpy(c + i * NR + j * VEC, &acc[i][j], sizeof(vf));
}

}  // namespace

extern "C" )") << sig.declaration() << s.apply(R"( {
  if (workspace_size) { *workspace_size = $WS$; return 0; }
  if (M != kM || N != kN || K != kK || batch != kBatch) return 2;  // compiled for one shape
)") << sig.null_checks("  ") << s.apply(R"(  if (kSplitK && workspace == nullptr) return 3;
  float* const acc_ws = reinterpret_cast<float*>(workspace);
  constexpr int64_t kBp = int64_t(KC) * ((NC + NR - 1) / NR * NR);
  float* const bp = static_cast<float*>(std::aligned_alloc(64, size_t(kBp) * 4));
  if (!bp) return 4;
  const int nthreads = THREADS > 0 ? THREADS : omp_get_max_threads();
  int rc = 0;
  for (int64_t b = 0; b < kBatch; ++b) {
    const TA* Ab = $A$ + offA + b * sAb;
    const TA* Bb = $B$ + offB + b * sBb;
    for (int64_t jc = 0; jc < kN; jc += NC) {
      const int64_t nc = kN - jc < NC ? kN - jc : NC;
      const int64_t npanels = (nc + NR - 1) / NR;
      for (int64_t pc = 0; pc < kK; pc += KC) {
        const int64_t kc = kK - pc < KC ? kK - pc : KC;
        const bool first = pc == 0, last = pc + kc >= kK;
        const int64_t mblocks = (kM + MC - 1) / MC;
        // Split the columns so that there are enough tasks to balance the threads.
        const int64_t jsplit = npanels < 4 ? npanels : 4;
        const int64_t tasks = mblocks * jsplit;
#pragma omp parallel num_threads(nthreads)
        {
#pragma omp for schedule(static)
          for (int64_t jp = 0; jp < npanels; ++jp) {
            const int64_t cols = nc - jp * NR < NR ? nc - jp * NR : NR;
            pack_b_panel(Bb, bp + jp * NR * kc, jc + jp * NR, cols, pc, kc);
          }
          float* ap = static_cast<float*>(std::aligned_alloc(64, size_t(MC) * KC * 4));
          alignas(64) float tile[MR * NR];
          if (!ap) {
#pragma omp atomic write
            rc = 4;
          }
#pragma omp for schedule(dynamic, 1)
          for (int64_t t = 0; t < tasks; ++t) {
            if (!ap) continue;
            const int64_t ic = (t / jsplit) * MC;
            const int64_t js = t % jsplit;
            const int64_t p0 = npanels * js / jsplit, p1 = npanels * (js + 1) / jsplit;
            const int64_t mc = kM - ic < MC ? kM - ic : MC;
            pack_a(Ab, ap, ic, mc, pc, kc);
            // The A micro-panel (MR x kc) stays in L1 while this task's B panels stream from L2.
            for (int64_t ir = 0; ir < mc; ir += MR) {
              const int64_t rows = mc - ir < MR ? mc - ir : MR;
              for (int64_t jp = p0; jp < p1; ++jp) {
                const int64_t n0 = jc + jp * NR;
                const int64_t cols = nc - jp * NR < NR ? nc - jp * NR : NR;
                micro_kernel(kc, ap + ir * kc, bp + jp * NR * kc, tile);
                for (int64_t i = 0; i < rows; ++i) {
                  const int64_t m = ic + ir + i;
                  for (int64_t j = 0; j < cols; ++j) {
                    const int64_t n = n0 + j;
                    float v = tile[i * NR + j];
                    if (kSplitK) {
                      float* w = acc_ws + m * kN + n;
                      if (!first) v += *w;
                      if (!last) { *w = v; continue; }
                    }
                    kf_store($C$ + offC + b * sCb + m * sCm + n * sCn, kf_epilogue(v, b, m, n$EPARGS$));
                  }
                }
              }
            }
          }
          std::free(ap);
        }
      }
    }
  }
  std::free(bp);
  return rc;
}
)");
  return src.str();
}

}  // namespace kforge::core::templates
