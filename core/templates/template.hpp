// The template engine (DESIGN §3, template mode). A Template turns a TemplateSpec —
// tensors, tuning parameters, a fused epilogue — into a kernel source with the literal
// KERNEL_NAME and the exported signature, plus the Abi that describes the call, exactly
// as Inductor's template kernels render. Templates are stateless and thread-safe.
//
// check() fills in defaults and rejects what cannot be built (an unknown parameter, a
// value out of range or inconsistent with the others or with the arch, shapes that do
// not agree, a dtype the backend cannot do) as kBadRequest naming the field and the
// limit it broke. render() only runs on a checked request; `reference` asks for the
// simple, obviously-right rendering that verification compares against.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/abi.hpp"
#include "core/base/backend.hpp"
#include "core/toolchain/cpu_target.hpp"
#include "core/request/request.hpp"

namespace kforge::core::templates {

struct ParamSpec {
  std::string name;
  std::string type;  // "int" or "enum"
  std::vector<nlohmann::json> allowed;  // the values a request may give
  nlohmann::json default_value;
  std::string description;
  nlohmann::json to_json() const;
};

struct TemplateRequest {
  Backend backend = Backend::kCpu;
  std::vector<std::string> archs;  // resolved
  TemplateSpec spec;               // spec.params complete after check()
  CpuIsa cpu;                      // cpu: what archs[0] offers (Toolchain::cpu_isa)
};

struct Rendered {
  std::string source;  // with KERNEL_NAME
  Abi abi;             // symbol KERNEL_NAME; workspace_bytes set
  std::string family;  // names the kernel: <backend>_<family>_<key12>
};

class Template {
 public:
  virtual ~Template() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  // The parameters for req.backend; defaults may follow the target (req.archs, req.cpu).
  virtual std::vector<ParamSpec> params(const TemplateRequest& req) const = 0;
  // The catalog of choices autotuning tries by default for this request.
  virtual std::vector<nlohmann::json> default_choices(const TemplateRequest& req) const = 0;
  virtual Result<void> check(TemplateRequest& req) const = 0;
  virtual Result<Rendered> render(const TemplateRequest& req, bool reference) const = 0;

  nlohmann::json describe(const TemplateRequest& req) const;  // for GET /templates/{name}
};

// Makes one template; builtin_templates() (builtin.cpp) is the table of the built-in ones.
using TemplateFactory = std::unique_ptr<Template> (*)();
std::span<const TemplateFactory> builtin_templates();

class Registry {
 public:
  // One of each builtin_templates(), made on first use.
  static const Registry& builtin();
  const Template* find(const std::string& name) const;
  const std::vector<std::unique_ptr<Template>>& all() const { return templates_; }
  void add(std::unique_ptr<Template> t) { templates_.push_back(std::move(t)); }

 private:
  std::vector<std::unique_ptr<Template>> templates_;
};

// Fills defaults from `specs` into `params` and checks each value against its spec.
// Errors name "/params/<name>".
Result<void> apply_param_specs(const std::vector<ParamSpec>& specs, nlohmann::json& params);

}  // namespace kforge::core::templates
