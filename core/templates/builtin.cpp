// The built-in templates, one factory each: Registry::builtin() holds one of every template in
// this table, in its order. A new template adds its row here and nowhere else.
#include "core/templates/gemm.hpp"
#include "core/templates/template.hpp"

namespace kforge::core::templates {

std::span<const TemplateFactory> builtin_templates() {
  static constexpr TemplateFactory kTable[] = {
      make_gemm_template,
  };
  return kTable;
}

}  // namespace kforge::core::templates
