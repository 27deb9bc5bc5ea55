// Small text tools for renderers: $name$ substitution and the gemm problem as constexprs.
#pragma once

#include <map>
#include <string>

#include "core/templates/gemm_problem.hpp"

namespace kforge::core::templates {

class Subst {
 public:
  Subst& set(const std::string& k, const std::string& v) { vars_[k] = v; return *this; }
  Subst& set(const std::string& k, const char* v) { vars_[k] = v; return *this; }
  template <class T>
  Subst& set(const std::string& k, T v) { vars_[k] = std::to_string(v); return *this; }
  const std::string& get(const std::string& k) const { return vars_.at(k); }
  // Replaces every $name$ with its value, and every /*$name$*/ (an insertion point of a kernel
  // file: kernel_file.hpp) including its comment marks; values are not scanned again. An
  // unknown name is a bug and throws std::logic_error.
  std::string apply(const std::string& text) const;

 private:
  std::map<std::string, std::string> vars_;
};

// The problem's sizes, strides and offsets, and $SHAPE_CHECK$: the entry's check of its size
// arguments (returning 2), the shape it was rendered for or, with p.any_m, that shape with any
// M a 32-bit TMA coordinate reaches (M = 0: nothing to do).
void set_problem(Subst& s, const GemmProblem& p);
// "constexpr int64_t kM = 127, ...; constexpr int64_t sAm = ..., ...;"; with p.any_m there is
// no kM: the kernels take M as an argument.
std::string problem_constants(const Subst& s, const GemmProblem& p);

}  // namespace kforge::core::templates
