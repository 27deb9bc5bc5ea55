#include "core/templates/template.hpp"

#include <algorithm>

namespace kforge::core::templates {

nlohmann::json ParamSpec::to_json() const {
  return {{"name", name}, {"type", type}, {"allowed", allowed}, {"default", default_value},
          {"description", description}};
}

nlohmann::json Template::describe(const TemplateRequest& req) const {
  nlohmann::json ps = nlohmann::json::array();
  for (const auto& p : params(req)) ps.push_back(p.to_json());
  return {{"name", name()}, {"backend", backend_name(req.backend)}, {"description", description()}, {"params", ps}};
}

const Registry& Registry::builtin() {
  static const Registry* r = [] {
    auto* reg = new Registry();
    for (const TemplateFactory make : builtin_templates()) reg->add(make());
    return reg;
  }();
  return *r;
}

const Template* Registry::find(const std::string& name) const {
  for (const auto& t : templates_) {
    if (t->name() == name) return t.get();
  }
  return nullptr;
}

Result<void> apply_param_specs(const std::vector<ParamSpec>& specs, nlohmann::json& params) {
  if (!params.is_object()) return fail_field("/params", "must be an object of tuning parameters");
  Error err = Error::make(ErrorKind::kBadRequest, "");
  for (auto it = params.begin(); it != params.end(); ++it) {
    if (std::none_of(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.name == it.key(); })) {
      std::string known;
      for (const auto& s : specs) known += (known.empty() ? "" : ", ") + s.name;
      err.fields.push_back({"/params/" + it.key(), "unknown parameter `" + it.key() + "` (known: " + known + ")"});
    }
  }
  for (const auto& s : specs) {
    if (!params.contains(s.name)) {
      params[s.name] = s.default_value;
      continue;
    }
    const auto& v = params[s.name];
    if (s.type == "int" && !v.is_number_integer()) {
      err.fields.push_back({"/params/" + s.name, "must be an integer"});
    } else if (std::find(s.allowed.begin(), s.allowed.end(), v) == s.allowed.end()) {
      std::string list;
      for (const auto& a : s.allowed) list += (list.empty() ? "" : ", ") + a.dump();
      const std::string given = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      err.fields.push_back({"/params/" + s.name, "value " + (given.size() > 64 ? given.substr(0, 60) + " ..." : given) +
                                                     " is not allowed (allowed: " + list + ")"});
    }
  }
  if (err.fields.empty()) return {};
  err.message = err.fields.size() == 1 ? err.fields[0].message : std::to_string(err.fields.size()) + " invalid parameters";
  return std::unexpected(err);
}

}  // namespace kforge::core::templates
