#include "core/base/dtype.hpp"

#include <array>
#include <utility>

namespace kforge::core {

std::string_view dtype_name(Dtype d) {
  switch (d) {
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kFloat16:
      return "float16";
    case Dtype::kBFloat16:
      return "bfloat16";
    case Dtype::kFloat64:
      return "float64";
    case Dtype::kInt8:
      return "int8";
    case Dtype::kInt32:
      return "int32";
    case Dtype::kInt64:
      return "int64";
    case Dtype::kUInt8:
      return "uint8";
  }
  return "?";
}

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (Dtype d : kAllDtypes) {
    if (dtype_name(d) == name) return d;
  }
  return std::nullopt;
}

size_t dtype_size(Dtype d) {
  switch (d) {
    case Dtype::kFloat32:
    case Dtype::kInt32:
      return 4;
    case Dtype::kFloat16:
    case Dtype::kBFloat16:
      return 2;
    case Dtype::kFloat64:
    case Dtype::kInt64:
      return 8;
    case Dtype::kInt8:
    case Dtype::kUInt8:
      return 1;
  }
  return 0;
}

std::optional<Dtype> dtype_from_ctype(std::string_view ctype) {
  static constexpr std::array<std::pair<std::string_view, Dtype>, 21> kTable{{
      {"float", Dtype::kFloat32},
      {"double", Dtype::kFloat64},
      {"half", Dtype::kFloat16},
      {"__half", Dtype::kFloat16},
      {"_Float16", Dtype::kFloat16},
      {"at::Half", Dtype::kFloat16},
      {"cutlass::half_t", Dtype::kFloat16},
      {"ck::half_t", Dtype::kFloat16},
      {"bfloat16", Dtype::kBFloat16},
      {"__nv_bfloat16", Dtype::kBFloat16},
      {"hip_bfloat16", Dtype::kBFloat16},
      {"__hip_bfloat16", Dtype::kBFloat16},
      {"cutlass::bfloat16_t", Dtype::kBFloat16},
      {"ck::bhalf_t", Dtype::kBFloat16},
      {"at::BFloat16", Dtype::kBFloat16},
      {"int8_t", Dtype::kInt8},
      {"int32_t", Dtype::kInt32},
      {"int", Dtype::kInt32},
      {"int64_t", Dtype::kInt64},
      {"uint8_t", Dtype::kUInt8},
      {"bf16", Dtype::kBFloat16},
  }};
  for (const auto& [c, d] : kTable) {
    if (c == ctype) return d;
  }
  return std::nullopt;
}

std::string all_dtype_names() {
  std::string out;
  for (Dtype d : kAllDtypes) {
    if (!out.empty()) out += ", ";
    out += dtype_name(d);
  }
  return out;
}

}  // namespace kforge::core
