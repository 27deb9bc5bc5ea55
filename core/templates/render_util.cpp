#include "core/templates/render_util.hpp"

#include <stdexcept>

namespace kforge::core::templates {

std::string Subst::apply(const std::string& text) const {
  std::string out;
  out.reserve(text.size() + 256);
  size_t pos = 0;
  while (true) {
    size_t a = text.find('$', pos);
    if (a == std::string::npos) break;
    size_t b = text.find('$', a + 1);
    if (b == std::string::npos) throw std::logic_error("unterminated $ in template text");
    // `/*$name$*/`, an insertion point: the comment marks go with it.
    const bool marks = a >= pos + 2 && text.compare(a - 2, 2, "/*") == 0 && text.compare(b + 1, 2, "*/") == 0;
    out.append(text, pos, (marks ? a - 2 : a) - pos);
    auto it = vars_.find(text.substr(a + 1, b - a - 1));
    if (it == vars_.end()) throw std::logic_error("template variable $" + text.substr(a + 1, b - a - 1) + "$ is not set");
    out += it->second;
    pos = marks ? b + 3 : b + 1;
  }
  out.append(text, pos);
  return out;
}

void set_problem(Subst& s, const GemmProblem& p) {
  s.set("kM", p.M).set("kN", p.N).set("kK", p.K).set("kBatch", p.batch);
  s.set("sAb", p.sAb).set("sAm", p.sAm).set("sAk", p.sAk).set("offA", p.offA);
  s.set("sBb", p.sBb).set("sBk", p.sBk).set("sBn", p.sBn).set("offB", p.offB);
  s.set("sCb", p.sCb).set("sCm", p.sCm).set("sCn", p.sCn).set("offC", p.offC);
  s.set("SHAPE_CHECK",
        p.any_m ? "  if (M < 0 || M > (int64_t(1) << 31) - 256 || N != kN || K != kK || batch != kBatch) return 2;  // compiled for one N, K, batch\n"
                  "  if (M == 0) return 0;\n"
                : "  if (M != kM || N != kN || K != kK || batch != kBatch) return 2;  // compiled for one shape\n");
}

std::string problem_constants(const Subst& s, const GemmProblem& p) {
  return s.apply(
      std::string(p.any_m ? "// The problem this kernel was rendered for, but M: it takes any M as an argument.\n"
                            "constexpr int64_t kN = $kN$, kK = $kK$, kBatch = $kBatch$;\n"
                          : "// The problem this kernel was rendered for.\n"
                            "constexpr int64_t kM = $kM$, kN = $kN$, kK = $kK$, kBatch = $kBatch$;\n") +
      "constexpr int64_t sAb = $sAb$, sAm = $sAm$, sAk = $sAk$, offA = $offA$;  // A[b][m][k]\n"
      "constexpr int64_t sBb = $sBb$, sBk = $sBk$, sBn = $sBn$, offB = $offB$;  // B[b][k][n]\n"
      "constexpr int64_t sCb = $sCb$, sCm = $sCm$, sCn = $sCn$, offC = $offC$;  // C[b][m][n]\n");
}

}  // namespace kforge::core::templates
