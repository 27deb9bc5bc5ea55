#include "core/base/tensor.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

namespace kforge::core {

namespace {

// The storage bound every kernel and runner relies on (2^34 elements: 128 GiB of float64).
constexpr int64_t kMaxStorage = int64_t{1} << 34;

// a * b + c in int64_t, or nullopt on overflow: sizes, strides and offsets come from the
// request, and a wrapped product would pass every bound checked after it.
std::optional<int64_t> mul_add(int64_t a, int64_t b, int64_t c) {
  int64_t p = 0, r = 0;
  if (__builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(p, c, &r)) return std::nullopt;
  return r;
}

}  // namespace

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (__builtin_mul_overflow(n, s, &n)) return INT64_MAX;  // parse_tensor() refuses these
  }
  return n;
}

std::optional<int64_t> TensorMeta::checked_storage_elements() const {
  std::optional<int64_t> n = mul_add(1, 1, offset);
  for (size_t i = 0; i < sizes.size() && n; ++i) n = mul_add(sizes[i] - 1, strides[i], *n);
  return n;
}

int64_t TensorMeta::storage_elements() const { return checked_storage_elements().value_or(INT64_MAX); }

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
    // Past int64_t, no later stride can reach the span: every later dimension overlaps.
    if (__builtin_mul_overflow(t.strides[d], t.sizes[d], &span)) span = INT64_MAX;
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
    for (size_t i = t.sizes.size(); i-- > 1;) {
      // Saturates: a stride past 2^40 is refused below, naming the sizes that made it.
      if (__builtin_mul_overflow(t.strides[i], std::max<int64_t>(t.sizes[i], 1), &t.strides[i - 1]))
        t.strides[i - 1] = INT64_MAX;
    }
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
    if (t.strides[i] > (int64_t{1} << 40)) {
      return fail_field(field + (j.contains("strides") ? "/strides/" + std::to_string(i) : std::string("/sizes")),
                        "stride too large (over 2^40 elements)");
    }
  }
  {
    int64_t n = 1;
    for (int64_t s : t.sizes) {
      if (__builtin_mul_overflow(n, s, &n)) return fail_field(field + "/sizes", "the element count overflows 64 bits");
    }
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
  // Checked: offset 2^63-1, or sizes [2^31, 24] with strides [2^33, 1], would wrap.
  const auto storage = t.checked_storage_elements();
  if (!storage || *storage > kMaxStorage) {
    const bool by_offset = t.offset >= kMaxStorage || !mul_add(1, 1, t.offset);
    return fail_field(field + (by_offset ? "/offset" : "/strides"),
                      "tensor storage over 2^34 elements" + std::string(storage ? "" : " (it overflows 64 bits)"));
  }
  return t;
}

}  // namespace kforge::core
