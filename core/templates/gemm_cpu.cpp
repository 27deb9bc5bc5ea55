// The cpu gemm: BLIS-style blocking (jc -> pc -> ic -> jr groups -> ir -> jr), A and B packed
// into contiguous float panels (converting float16/bfloat16 and any strides on the way), an
// MR x NR register-blocked micro-kernel on GCC vector extensions. One OpenMP region for the
// whole call: each thread owns a fixed block of C's micro-tiles (rows first), packs its own A
// rows, and shares the packing of each B block (double-buffered, one barrier per K panel).
// When K spans several kc panels the partial sums live in C itself (float32 output with
// contiguous rows and no epilogue tensor that could alias it), else in the float32 workspace.
#include <sstream>

#include "core/templates/gemm.hpp"
#include "core/templates/render_util.hpp"

namespace kforge::core::templates {

std::string render_gemm_cpu(const TemplateRequest& req, const GemmProblem& p, const KernelSignature& sig,
                            const EpilogueCode& ep, uint64_t& workspace_bytes) {
  const auto& q = req.spec.params;
  const int kc = q["kc"];
  const bool acc_in_c = p.out == Dtype::kFloat32 && p.sCn == 1 && ep.args.empty();
  workspace_bytes = p.K > kc && !acc_in_c ? uint64_t(p.M) * uint64_t(p.N) * 4 : 0;
  Subst s;
  s.set("TA", element_ctype(req.backend, p.ab)).set("TC", element_ctype(req.backend, p.out));
  set_problem(s, p);
  for (const char* k : {"mr", "nr", "vec", "mc", "kc", "nc", "threads"}) s.set(k, q[k].get<int>());
  s.set("A", sig.arg(0)).set("B", sig.arg(1)).set("C", sig.out_arg()).set("EPARGS", ep.args);
  s.set("WS", workspace_bytes).set("ACC_IN_C", acc_in_c ? "true" : "false");
  s.set("IDENTITY", req.spec.epilogue.empty() && p.out == Dtype::kFloat32 ? "true" : "false");
  const int vec = q["vec"];
  s.set("BCAST", vec == 16 ? "_mm512_set1_ps" : vec == 8 ? "_mm256_set1_ps" : "_mm_set1_ps");
  std::ostringstream src;
  src << prelude(req.backend) << "#include <atomic>\n\nnamespace {\n" << problem_constants(s, p) << s.apply(R"(
constexpr int MR = $mr$, NR = $nr$, VEC = $vec$, MC = $mc$, KC = $kc$, NC = $nc$, THREADS = $threads$;
constexpr int NV = NR / VEC;
constexpr bool kSplitK = kK > KC;
// K in equal panels of at most KC (a multiple of 8): no short last panel that pays a whole
// pass over C for a little work.
constexpr int64_t kPanels = (kK + KC - 1) / KC;
constexpr int64_t kKC = ((kK + kPanels - 1) / kPanels + 7) / 8 * 8 < KC ? ((kK + kPanels - 1) / kPanels + 7) / 8 * 8 : KC;
constexpr bool kAccInC = $ACC_IN_C$, kAccInWorkspace = kSplitK && !kAccInC;
constexpr bool kIdentity = $IDENTITY$;  // no epilogue: the sums are the output
typedef float vf __attribute__((vector_size(VEC * 4)));
// A broadcast straight from memory (vbroadcastss m32): GCC's generic vector splat goes
// through a scalar register and costs a uop per row of the micro-tile.
static inline vf bcast(const float* p) { return (vf)$BCAST$(*p); }
using TA = $TA$;
using TC = $TC$;
)") << ep.function << s.apply(R"(
// The packing routines read A and B straight from memory in short strided runs that the
// hardware prefetcher does not follow, so they fetch the run they will read next themselves.
static inline void prefetch_run(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(static_cast<const char*>(p) + o, 0, 3);
}

// A[m0 : m0+rows, k0 : k0+kc] as one MR-row panel: for each k, MR consecutive rows (zero-padded).
static void pack_a_panel(const TA* __restrict A, float* __restrict dst, int64_t m0, int rows, int64_t k0, int64_t kc) {
  if constexpr (sAk == 1 && sAm != 1) {
    // Rows contiguous in k: read each row along k, write it MR floats apart (the panel, at
    // most 14 x 512 floats, stays in L1).
    for (int i = 0; i < rows; ++i) {
      const TA* src = A + (m0 + i) * sAm + k0;
      if (i + 2 < rows) prefetch_run(src + 2 * sAm, kc * int64_t(sizeof(TA)));
      for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = kf_to_float(src[k]);
    }
    for (int i = rows; i < MR; ++i)
      for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = 0.0f;
  } else {
    for (int64_t k = 0; k < kc; ++k) {
      const TA* col = A + (k0 + k) * sAk + m0 * sAm;
      if (k + 8 < kc) prefetch_run(col + 8 * sAk, MR * int64_t(sizeof(TA)));
      int i = 0;
      for (; i < rows; ++i) dst[i] = kf_to_float(col[i * sAm]);
      for (; i < MR; ++i) dst[i] = 0.0f;
      dst += MR;
    }
  }
}

// B[k0 : k0+kc, n0 : n0+cols] as one NR-column panel: for each k, NR consecutive columns.
static void pack_b_panel(const TA* __restrict B, float* __restrict dst, int64_t n0, int64_t cols, int64_t k0, int64_t kc) {
  if constexpr (sBk == 1 && sBn != 1) {
    // Columns contiguous in k (a transposed B): read each column along k, write it NR floats
    // apart, 128 k at a time (a whole panel is bigger than L1), fetching the next 128 ahead.
    for (int64_t kb = 0; kb < kc; kb += 128) {
      const int64_t ke = kc - kb < 128 ? kc : kb + 128;
      for (int64_t j = 0; j < cols; ++j) {
        const TA* src = B + (n0 + j) * sBn + k0;
        if (ke < kc) prefetch_run(src + ke, (kc - ke < 128 ? kc - ke : 128) * int64_t(sizeof(TA)));
        for (int64_t k = kb; k < ke; ++k) dst[k * NR + j] = kf_to_float(src[k]);
      }
      for (int64_t j = cols; j < NR; ++j)
        for (int64_t k = kb; k < ke; ++k) dst[k * NR + j] = 0.0f;
    }
  } else {
    for (int64_t k = 0; k < kc; ++k) {
      const TA* row = B + (k0 + k) * sBk + n0 * sBn;
      if (k + 8 < kc) prefetch_run(row + 8 * sBk, NR * int64_t(sizeof(TA)));
      int64_t j = 0;
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
}

// c[MR][NR] (rows ldc floats apart) = (add ? c : 0) + a_panel (MR x kc) * b_panel (kc x NR).
static inline void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                                int64_t ldc, bool add) {
  if (add) {
    // The tile of C it adds to is needed only after the K loop: start fetching it now.
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; j += 16) __builtin_prefetch(c + i * ldc + j, 1, 3);
  }
  vf acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[i][j] = (vf){};
#pragma GCC unroll 4
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
  if (add) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) {
        vf old;
        __builtin_memcpy(&old, c + i * ldc + j * VEC, sizeof(vf));
        acc[i][j] += old;
      }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) __builtin_memcpy(c + i * ldc + j * VEC, &acc[i][j], sizeof(vf));
}

// The threads as a tm x tn grid over (MR-row panels, NR-column panels) that gives the
// busiest thread the fewest micro-tiles; ties go to more row groups (each thread packs its own A).
static void thread_grid(int T, int64_t mp, int64_t np, int& tm, int& tn) {
  int64_t best = -1;
  for (int r = T; r >= 1; --r) {
    if (T % r) continue;
    const int64_t c = T / r, work = ((mp + r - 1) / r) * ((np + c - 1) / c);
    if (best < 0 || work < best) { best = work; tm = r; tn = int(c); }
  }
}

// The packing block (both B buffers and every thread's A buffer) outlives the call: fresh
// pages on every call would cost a page fault per 4 KiB touched. A call takes the block kept
// by the last one (or makes its own) and leaves it for the next; concurrent calls each hold
// their own, and the one left over is freed. No thread_local: a dlopened library's dynamic TLS
// crashes LeakSanitizer in a sanitized host process.
std::atomic<void*> g_kept_block{nullptr};
static float* take_block(size_t floats) {
  void* p = g_kept_block.exchange(nullptr, std::memory_order_acquire);
  if (p && *static_cast<size_t*>(p) >= floats) return reinterpret_cast<float*>(static_cast<char*>(p) + 64);
  std::free(p);
  p = std::aligned_alloc(64, 64 + (floats * 4 + 63) / 64 * 64);
  if (!p) return nullptr;
  *static_cast<size_t*>(p) = floats;
  return reinterpret_cast<float*>(static_cast<char*>(p) + 64);
}
static void keep_block(float* block) {
  std::free(g_kept_block.exchange(reinterpret_cast<char*>(block) - 64, std::memory_order_acq_rel));
}

}  // namespace

extern "C" )") << sig.declaration() << s.apply(R"( {
  if (workspace_size) { *workspace_size = $WS$; return 0; }
$SHAPE_CHECK$)") << sig.null_checks("  ") << s.apply(R"(  if (kAccInWorkspace && workspace == nullptr) return 3;
  constexpr int64_t kNcp = ((kN < NC ? kN : NC) + NR - 1) / NR * NR, kBp = kKC * kNcp;
  constexpr int64_t kMpanels = (kM + MR - 1) / MR;
  // B panels per group: a group stays in L2 (half of 1 MiB) while each A micro-panel sweeps it.
  constexpr int64_t kGroup = 524288 / (kKC * NR * 4) > 0 ? 524288 / (kKC * NR * 4) : 1;
  const int nthreads = THREADS > 0 ? THREADS : omp_get_max_threads();
  // Two B buffers (threads pack the next K panel into one while others may still read the
  // other), then one A buffer per thread, each 64-byte aligned.
  constexpr size_t kAp = (size_t(MC) * size_t(kKC) + 15) / 16 * 16;
  float* const block = take_block(size_t(2 * kBp) + size_t(nthreads) * kAp);
  if (!block) return 4;
  float* const bp = block;
  float* const ws = reinterpret_cast<float*>(workspace);
#pragma omp parallel num_threads(nthreads)
  {
    // Each thread owns a block of C's micro-tiles for the whole call; every thread packs its
    // share of each B block, and its own rows of A.
    const int T = omp_get_num_threads(), t = omp_get_thread_num();
    float* const ap = block + 2 * kBp + size_t(t) * kAp;
    alignas(64) float tile[MR * NR];
    int64_t pass = 0;
    for (int64_t b = 0; b < kBatch; ++b) {
      const TA* Ab = $A$ + offA + b * sAb;
      const TA* Bb = $B$ + offB + b * sBb;
      TC* const Cb = $C$ + offC + b * sCb;
      for (int64_t jc = 0; jc < kN; jc += NC) {
        const int64_t nc = kN - jc < NC ? kN - jc : NC;
        const int64_t npanels = (nc + NR - 1) / NR;
        int tm = 1, tn = 1;
        thread_grid(T, kMpanels, npanels, tm, tn);
        const int64_t q0 = kMpanels * (t / tn) / tm, q1 = kMpanels * (t / tn + 1) / tm;
        const int64_t r0 = npanels * (t % tn) / tn, r1 = npanels * (t % tn + 1) / tn;
        const int64_t mend = q1 * MR < kM ? q1 * MR : kM;
        for (int64_t pc = 0; pc < kK; pc += kKC, ++pass) {
          const int64_t kc = kK - pc < kKC ? kK - pc : kKC;
          const bool first = pc == 0, last = pc + kc >= kK;
          float* const bq = bp + (pass & 1) * kBp;
#pragma omp for schedule(static)
          for (int64_t jp = 0; jp < npanels; ++jp) {
            const int64_t cols = nc - jp * NR < NR ? nc - jp * NR : NR;
            pack_b_panel(Bb, bq + jp * NR * kc, jc + jp * NR, cols, pc, kc);
          }
          for (int64_t ic = q0 * MR; ic < mend; ic += MC) {
            const int64_t mc = mend - ic < MC ? mend - ic : MC;
            for (int64_t ir = 0; ir < mc; ir += MR) {
              pack_a_panel(Ab, ap + ir * kc, ic + ir, int(mc - ir < MR ? mc - ir : MR), pc, kc);
            }
            for (int64_t g0 = r0; g0 < r1; g0 += kGroup) {
              const int64_t g1 = g0 + kGroup < r1 ? g0 + kGroup : r1;
              for (int64_t ir = 0; ir < mc; ir += MR) {
                const int64_t m0 = ic + ir, rows = mc - ir < MR ? mc - ir : MR;
                // The A micro-panel (MR x kc) stays in L1 while the group's B panels stream from L2.
                for (int64_t jp = g0; jp < g1; ++jp) {
                  const int64_t n0 = jc + jp * NR, cols = nc - jp * NR < NR ? nc - jp * NR : NR;
                  const float* const a = ap + ir * kc;
                  const float* const bpanel = bq + jp * NR * kc;
                  // Where the sums live between K panels: C itself when it is float32 with
                  // contiguous rows, else the workspace (or only this tile when K is one panel).
                  float* acc = tile;
                  int64_t ld = NR;
                  if constexpr (kAccInC) { acc = reinterpret_cast<float*>(Cb) + m0 * sCm + n0; ld = sCm; }
                  else if constexpr (kAccInWorkspace) { acc = ws + m0 * kN + n0; ld = kN; }
                  if (rows == MR && cols == NR) {
                    micro_kernel(kc, a, bpanel, acc, ld, !first);
                  } else {
                    micro_kernel(kc, a, bpanel, tile, NR, false);
                    if (acc != tile) {
                      for (int64_t i = 0; i < rows; ++i)
                        for (int64_t j = 0; j < cols; ++j) acc[i * ld + j] = tile[i * NR + j] + (first ? 0.0f : acc[i * ld + j]);
                    }
                  }
                  if (!last || (kAccInC && kIdentity)) continue;
                  for (int64_t i = 0; i < rows; ++i) {
                    const int64_t m = m0 + i;
                    TC* const crow = Cb + m * sCm + n0 * sCn;
                    const float* const arow = acc + i * ld;
                    for (int64_t j = 0; j < cols; ++j) kf_store(crow + j * sCn, kf_epilogue(arow[j], b, m, n0 + j$EPARGS$));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  keep_block(block);
  return 0;
}
)");
  return src.str();
}

}  // namespace kforge::core::templates
