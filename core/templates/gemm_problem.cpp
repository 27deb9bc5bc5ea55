#include "core/templates/gemm_problem.hpp"

namespace kforge::core::templates {

GemmProblem gemm_problem(const TemplateSpec& s) {
  const TensorMeta& a = s.inputs[0];
  const TensorMeta& b = s.inputs[1];
  const TensorMeta& c = s.output;
  GemmProblem g;
  g.rank3 = c.rank() == 3;
  g.batch = g.rank3 ? c.sizes[0] : 1;
  g.M = c.sizes[c.rank() - 2];
  g.N = c.sizes[c.rank() - 1];
  g.K = a.sizes[a.rank() - 1];
  g.ab = a.dtype;
  g.out = c.dtype;
  auto bstride = [](const TensorMeta& t) { return t.rank() == 3 && t.sizes[0] > 1 ? t.strides[0] : 0; };
  g.sAb = bstride(a), g.sAm = a.strides[a.rank() - 2], g.sAk = a.strides[a.rank() - 1], g.offA = a.offset;
  g.sBb = bstride(b), g.sBk = b.strides[b.rank() - 2], g.sBn = b.strides[b.rank() - 1], g.offB = b.offset;
  g.sCb = bstride(c), g.sCm = c.strides[c.rank() - 2], g.sCn = c.strides[c.rank() - 1], g.offC = c.offset;
  // A size-1 dimension's stride is never used; make it 0 so that layouts compare by meaning.
  if (g.M == 1) g.sAm = g.sCm = 0;
  if (g.N == 1) g.sBn = g.sCn = 0;
  if (g.K == 1) g.sAk = g.sBk = 0;
  return g;
}

}  // namespace kforge::core::templates
