// The kernel ABI (DESIGN §4): the exported signature
//   extern "C" PT_EXPORT int <name>(tensors..., scalars..., size_t* workspace_size,
//                                   uint8_t* workspace, <stream_t> stream)
// parse_signature() reads it out of a source that carries the literal KERNEL_NAME, as
// Inductor's define_kernel hands it over; to_json() is the manifest's "abi" object, which
// describes a call completely so a client can make it without reading the source.
// Errors are kBadRequest naming "/source" with the reason (no KERNEL_NAME, no exported
// signature, an argument type the ABI cannot pass, a wrong trailing argument).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/backend.hpp"
#include "core/base/dtype.hpp"
#include "core/base/error.hpp"

namespace kforge::core {

inline constexpr std::string_view kKernelNamePlaceholder = "KERNEL_NAME";

enum class ArgKind { kTensor, kScalar, kWorkspaceSize, kWorkspace, kStream };
std::string_view arg_kind_name(ArgKind k);

struct AbiArg {
  std::string name;  // parameter name in the signature
  ArgKind kind = ArgKind::kScalar;
  std::string ctype;  // normalized C type, e.g. "const half*", "int64_t"
  // kTensor only:
  std::string binds;           // TensorMeta name the pointer takes
  std::optional<Dtype> dtype;  // element type, when the pointee is a known one
  bool is_const = false;       // read-only input
  // kScalar only: the value fixed by a template (M, N, K, leading dimensions).
  std::optional<int64_t> value;
  // kTensor of a template kernel: the tensor a call must pass, as the kernel was rendered
  // for it. JSON "sizes" (each a number, or the name of the scalar argument whose value it
  // is: a gemm's "M" at run time), "strides" (elements), "offset" (elements the kernel adds
  // to the pointer). Source-mode kernels take their sizes at run time: none.
  struct Layout {
    std::vector<int64_t> sizes;
    std::vector<std::string> size_args;  // per dimension: "" (sizes[i] holds), or a scalar's name
    std::vector<int64_t> strides;
    int64_t offset = 0;
  };
  std::optional<Layout> layout;
};

struct Abi {
  std::string symbol;  // exported name; KERNEL_NAME until named from the key
  std::vector<AbiArg> args;
  std::optional<uint64_t> workspace_bytes;  // known for template kernels

  std::string signature() const;  // "int <symbol>(const float* a, ...)"
  nlohmann::json to_json() const;
  static Result<Abi> from_json(const nlohmann::json& j);
  std::vector<const AbiArg*> tensors() const;
};

// Finds `PT_EXPORT int KERNEL_NAME(...)` in `source` and parses its parameters.
Result<Abi> parse_signature(std::string_view source, Backend backend);

// Replaces every KERNEL_NAME token in `source` with `symbol`.
std::string substitute_kernel_name(std::string_view source, std::string_view symbol);
// Every whole-identifier occurrence of `from` replaced by `to` (`from` inside a longer
// identifier is left alone); contains_identifier() asks whether there is one.
std::string replace_identifier(std::string_view source, std::string_view from, std::string_view to);
bool contains_identifier(std::string_view source, std::string_view name);

}  // namespace kforge::core
