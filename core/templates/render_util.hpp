// Small text tools for renderers: $name$ substitution and the gemm problem as constexprs.
#pragma once

#include <map>
#include <string>

#include "core/templates/gemm.hpp"

namespace kforge::core::templates {

class Subst {
 public:
  Subst& set(const std::string& k, const std::string& v) { vars_[k] = v; return *this; }
  Subst& set(const std::string& k, const char* v) { vars_[k] = v; return *this; }
  template <class T>
  Subst& set(const std::string& k, T v) { vars_[k] = std::to_string(v); return *this; }
  const std::string& get(const std::string& k) const { return vars_.at(k); }
  // Replaces every $name$; an unknown name is a bug and throws.
  std::string apply(const std::string& text) const;

 private:
  std::map<std::string, std::string> vars_;
};

void set_problem(Subst& s, const GemmProblem& p);
// "constexpr int64_t kM = 127, ...; constexpr int64_t sAm = ..., ...;". With `runtime_m`
// (gemm.hpp) there is no kM: the kernels take M as an argument.
std::string problem_constants(const Subst& s, bool runtime_m = false);
// The entry's check of its size arguments (returning 2): the shape it was rendered for, or
// with `runtime_m` that shape with any M a 32-bit TMA coordinate reaches (M = 0: nothing to do).
std::string shape_check(bool runtime_m);

}  // namespace kforge::core::templates
