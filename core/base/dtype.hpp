// Tensor element types under torch's names, and the C spellings kernels use for them
// (so that a parsed signature `const half* X` can be bound to a float16 tensor).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kforge::core {

enum class Dtype { kFloat32, kFloat16, kBFloat16, kFloat64, kInt8, kInt32, kInt64, kUInt8 };

inline constexpr Dtype kAllDtypes[] = {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16,
                                       Dtype::kFloat64, Dtype::kInt8,    Dtype::kInt32,
                                       Dtype::kInt64,   Dtype::kUInt8};

std::string_view dtype_name(Dtype d);
std::optional<Dtype> parse_dtype(std::string_view name);
size_t dtype_size(Dtype d);
// Maps an element C type as written in a kernel signature ("half", "__nv_bfloat16",
// "float", "int64_t", ...) to its dtype; nullopt for anything else (void, structs).
std::optional<Dtype> dtype_from_ctype(std::string_view ctype);
std::string all_dtype_names();  // "float32, float16, ..." for error messages

}  // namespace kforge::core
