// The request model for POST /kernels (DESIGN §3) and its validation. Parsing never
// throws: every problem is a kBadRequest Error whose fields name the JSON pointer of the
// offending value, and unknown fields are rejected so that a typo never silently does
// nothing. Limits (source length, list lengths) are those of RequestLimits.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/backend.hpp"
#include "core/base/tensor.hpp"
#include "core/base/error.hpp"
#include "core/toolchain/toolchain.hpp"

namespace kforge::core {

struct RequestLimits {
  size_t max_source_bytes = 1 << 20;
  size_t max_archs = 16;
  size_t max_string = 256;
  size_t max_inputs = 16;
  size_t max_epilogue = 16;
};

// One elementwise step of a fused epilogue, applied in registers before the store.
struct EpilogueOp {
  std::string op;            // add mul scale relu gelu silu sigmoid tanh cast
  int input = -1;            // add, mul: index into `inputs`
  double value = 0;          // scale
  bool tanh_approx = false;  // gelu: "approximate": "tanh"
  Dtype dtype = Dtype::kFloat32;  // cast: round through this dtype
  nlohmann::json to_json() const;
};

// Template mode: what Inductor's scheduler hands to a template's render().
struct TemplateSpec {
  std::string name;
  nlohmann::json params = nlohmann::json::object();  // as given; the template validates
  std::vector<TensorMeta> inputs;
  TensorMeta output;
  std::vector<int> input_reorder;  // kernel argument order of `inputs` (a permutation)
  std::vector<EpilogueOp> epilogue;
  nlohmann::json to_json() const;
};

struct KernelRequest {
  Backend backend = Backend::kCpu;
  std::vector<std::string> archs{"native"};  // as asked; resolved by the toolchain
  std::string source;                        // source mode: the text with KERNEL_NAME
  // Source mode: the name the source exports in place of KERNEL_NAME (Inductor's
  // `cutlass_<hash>`). The kernel key does not depend on it: a rename links, never compiles.
  std::string export_name;
  std::optional<TemplateSpec> tmpl;          // template mode
  bool reference = false;                    // template mode: the reference rendering
  nlohmann::json benchmark;                  // null, or the validated "benchmark" object
  CompileOptions options;

  // The request in canonical form (resolved archs in place of the asked ones): what the
  // request key hashes.
  nlohmann::json canonical(const std::vector<std::string>& resolved_archs) const;
};

Result<KernelRequest> parse_kernel_request(const nlohmann::json& body,
                                           const RequestLimits& limits = {});

// Parses a request body; invalid JSON is a kBadRequest naming the byte offset.
Result<nlohmann::json> parse_json_body(std::string_view body, size_t max_depth = 64);

}  // namespace kforge::core
