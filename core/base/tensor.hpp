// TensorMeta (DESIGN §3): a tensor as a kernel sees it — dtype, sizes, strides in
// elements, storage offset. parse_tensor() validates one against the limits a kernel
// can honour (no negative strides, no overlapping elements) and names the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/dtype.hpp"
#include "core/base/error.hpp"

namespace kforge::core {

struct TensorMeta {
  std::string name;
  Dtype dtype = Dtype::kFloat32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;

  size_t rank() const { return sizes.size(); }
  int64_t numel() const;
  // Elements the storage must hold: sum((size-1)*stride) + 1 + offset; nullopt when that
  // overflows int64_t. storage_elements() saturates at INT64_MAX (parse_tensor() refuses it).
  std::optional<int64_t> checked_storage_elements() const;
  int64_t storage_elements() const;
  nlohmann::json to_json() const;
};

// `field` is the JSON pointer of the tensor ("/inputs/0"). `allow_broadcast` admits
// stride 0 on dimensions of size > 1 (an expanded view, read-only); output tensors never.
Result<TensorMeta> parse_tensor(const nlohmann::json& j, const std::string& field,
                                bool allow_broadcast = false);

// True when two distinct index tuples can address the same element.
bool overlaps(const TensorMeta& t);

}  // namespace kforge::core
