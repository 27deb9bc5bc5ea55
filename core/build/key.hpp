// What a kernel's keys are made of (DESIGN §5, docs/ARCHITECTURE.md "Keys"): a request
// after validation (PreparedRequest: archs resolved, parameters complete, its request key),
// the kernel rendered from it (RenderedKernel: source, ABI, compile steps, kernel key), and
// the functions that derive the kernel key, the export key and the symbol. Both the builder
// (core/build/build.hpp) and "why did this miss" (core/build/why.hpp) read keys through this file, and
// neither through the other. Pure: nothing here reads the disk or the network.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/base/abi.hpp"
#include "core/toolchain/cpu_target.hpp"
#include "core/request/request.hpp"
#include "core/templates/template.hpp"
#include "core/toolchain/toolchain.hpp"

namespace kforge::core {

// The key derivation, exposed for tests and for `kforge render`.
struct KeyInputs {
  Backend backend;
  std::vector<std::string> archs;
  const Toolchain* toolchain;
  std::vector<CompileStep> steps;
  std::string source;  // with KERNEL_NAME
  std::vector<IncludeDir> includes;  // hashed as their libraries' identities, not host paths
};
std::string kernel_key(const KeyInputs& in);
// The source as the key hashes it: without leading and trailing whitespace (editors and
// generators disagree on the final newline; the compiler does not care).
std::string_view key_source_text(std::string_view source);
// The key of a kernel exported under `name`: the kernel `key` relinked (DESIGN: export entries).
std::string export_key(const std::string& key, const std::string& name);
std::string kernel_symbol(Backend backend, std::string_view family, const std::string& key);

// A request after validation: archs resolved, template parameters complete, request key.
struct PreparedRequest {
  KernelRequest req;
  const Toolchain* toolchain = nullptr;
  std::vector<std::string> archs;
  std::string request_key;
  CpuIsa cpu;  // cpu: what archs[0] offers (the template's machine model)
  std::vector<IncludeDir> includes;  // options.includes, resolved against the libraries

  // What the template sees: the resolved archs, the spec, the cpu machine model.
  templates::TemplateRequest template_request() const { return {req.backend, archs, *req.tmpl, cpu}; }
  // Where the request asks for a benchmark: a kBadRequest naming /arch when a kernel for
  // this target cannot run on this host (a cpu target with features the host lacks).
  Result<void> check_runnable() const;
};

// The source to compile and everything derived from it.
struct RenderedKernel {
  std::string source;  // with KERNEL_NAME
  Abi abi;             // symbol already named from the key
  std::string family;
  std::vector<CompileStep> steps;
  std::string key;
  // With the request's export_name: the entry that exports it (kernel.o renamed, relinked).
  std::string export_name;
  std::string export_key;
  // The entry the request is answered with: the export entry, or the kernel itself.
  const std::string& answer_key() const { return export_key.empty() ? key : export_key; }
  const std::string& answer_name() const { return export_name.empty() ? abi.symbol : export_name; }
};

}  // namespace kforge::core
