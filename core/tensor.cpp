#include "core/tensor.hpp"

#include <algorithm>
#include <numeric>

namespace kforge::core {

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

int64_t TensorMeta::storage_elements() const {
  int64_t n = 1 + offset;
  for (size_t i = 0; i < sizes.size(); ++i) n += (sizes[i] - 1) * strides[i];
  return n;
}

nlohmann::json TensorMeta::to_json() const {
  return {{"name", name}, {"dtype", dtype_name(dtype)}, {"sizes", sizes}, {"strides", strides},
          {"offset", offset}};
}

bool overlaps(const TensorMeta& t) {
  std::vector<size_t> dims;
  for (size_t i = 0; i < t.rank(); ++i) {
    if (t.sizes[i] > 1) dims.push_back(i);
  }
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return t.strides[a] < t.strides[b]; });
  int64_t span = 1;  // elements covered by the dims so far, densely
  for (size_t d : dims) {
    if (t.strides[d] < span) return true;
    span = t.strides[d] * t.sizes[d];
  }
  return false;
}

Result<TensorMeta> parse_tensor(const nlohmann::json& j, const std::string& field, bool allow_broadcast) {
  if (!j.is_object()) return fail_field(field, "a tensor is an object {name, dtype, sizes, strides, offset}");
  for (auto it = j.begin(); it != j.end(); ++it) {
    static const char* kKnown[] = {"name", "dtype", "sizes", "strides", "offset"};
    if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return it.key() == k; }) ==
        std::end(kKnown)) {
      return fail_field(field + "/" + it.key(), "unknown field `" + it.key() + "` (known: name, dtype, sizes, strides, offset)");
    }
  }
  TensorMeta t;
  if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty() ||
      j["name"].get<std::string>().size() > 64) {
    return fail_field(field + "/name", "required: a name of 1 to 64 characters");
  }
  t.name = j["name"].get<std::string>();
  for (char c : t.name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      return fail_field(field + "/name", "a tensor name is letters, digits and underscores (it becomes a parameter name)");
    }
  }
  if (std::isdigit(static_cast<unsigned char>(t.name[0]))) return fail_field(field + "/name", "a tensor name cannot start with a digit");
  if (!j.contains("dtype") || !j["dtype"].is_string() || !parse_dtype(j["dtype"].get<std::string>())) {
    return fail_field(field + "/dtype", "required: one of " + all_dtype_names());
  }
  t.dtype = *parse_dtype(j["dtype"].get<std::string>());
  auto ints = [&](const char* key, std::vector<int64_t>& out) -> Result<void> {
    if (!j.contains(key) || !j[key].is_array() || j[key].size() > 8) {
      return fail_field(field + "/" + key, std::string("required: a list of at most 8 integers"));
    }
    for (size_t i = 0; i < j[key].size(); ++i) {
      if (!j[key][i].is_number_integer()) return fail_field(field + "/" + key + "/" + std::to_string(i), "must be an integer");
      out.push_back(j[key][i].get<int64_t>());
    }
    return {};
  };
  if (auto r = ints("sizes", t.sizes); !r) return std::unexpected(r.error());
  if (j.contains("strides")) {
    if (auto r = ints("strides", t.strides); !r) return std::unexpected(r.error());
  } else {  // contiguous by default
    t.strides.assign(t.sizes.size(), 1);
    for (size_t i = t.sizes.size(); i-- > 1;) t.strides[i - 1] = t.strides[i] * std::max<int64_t>(t.sizes[i], 1);
  }
  if (t.strides.size() != t.sizes.size()) {
    return fail_field(field + "/strides", "has " + std::to_string(t.strides.size()) + " entries for " +
                                              std::to_string(t.sizes.size()) + " sizes");
  }
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    if (t.sizes[i] < 1 || t.sizes[i] > kMaxDim) {
      return fail_field(field + "/sizes/" + std::to_string(i), "a size is between 1 and 2^31");
    }
    if (t.strides[i] < 0) return fail_field(field + "/strides/" + std::to_string(i), "negative strides are not supported");
    if (t.strides[i] > (int64_t{1} << 40)) return fail_field(field + "/strides/" + std::to_string(i), "stride too large");
  }
  if (j.contains("offset")) {
    if (!j["offset"].is_number_integer() || j["offset"].get<int64_t>() < 0) {
      return fail_field(field + "/offset", "a storage offset is a non-negative integer");
    }
    t.offset = j["offset"].get<int64_t>();
  }
  if (!allow_broadcast && overlaps(t)) {
    return fail_field(field + "/strides", "strides make elements overlap (two indices address one element)");
  }
  if (t.storage_elements() > (int64_t{1} << 34)) return fail_field(field, "tensor storage over 2^34 elements");
  return t;
}

}  // namespace kforge::core
