// libFuzzer target: the header values and query strings kforge reads itself
// (api/http_head.cpp) — Range, against a representation of any size, If-None-Match, against
// an ETag, and a target's query (split_query, then httplib's percent-decoder, as the routes
// read it). The input's first 8 bytes are the size, the rest the value. Whatever the value,
// a Range is the whole file, one part inside it, or unsatisfiable, never a part past the
// end; an entity tag always matches itself and "*"; and the query's pairs are its non-empty
// `&`-separated parts, in order, each split at its first `=`.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <httplib.h>

#include "api/http_head.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kforge::api;
  if (size < 8) return 0;
  uint64_t file_size = 0;
  std::memcpy(&file_size, data, 8);
  file_size %= uint64_t(1) << 40;  // files of up to 1 TiB
  const std::string_view value(reinterpret_cast<const char*>(data) + 8, size - 8);

  const ByteRange r = parse_range(value, file_size);
  switch (r.kind) {
    case ByteRange::Kind::kPart:
      if (r.first > r.last || r.last >= file_size) std::abort();
      break;
    case ByteRange::Kind::kUnsatisfiable:
    case ByteRange::Kind::kWhole:
      break;
  }

  const std::string etag = "\"" + std::string(64, 'a') + "\"";
  (void)none_match(value, etag);
  // The value as an ETag of its own (its quotes removed): it matches itself, weakly too.
  std::string tag(value);
  std::erase(tag, '"');
  const std::string quoted = "\"" + tag + "\"";
  if (!none_match(quoted, quoted) || !none_match("W/" + quoted, quoted) || !none_match("*", quoted)) std::abort();
  if (!none_match("\"x\", " + quoted, quoted)) std::abort();
  (void)has_token(value, "close");

  // The value as a target's query: the pairs put back together are the query without its
  // empty parts, and a name never holds `=` or `&`, a value never `&`.
  const std::string target = "/cache/export?" + std::string(value);
  std::string joined, expected;
  for (const auto& [name, v] : split_query(target)) {
    if (name.find_first_of("=&") != std::string_view::npos || v.find('&') != std::string_view::npos) std::abort();
    if (!joined.empty()) joined += '&';
    joined.append(name);
    const size_t at = size_t(name.data() - target.data()) + name.size();
    if (at < target.size() && target[at] == '=') joined.append("=").append(v);
    (void)httplib::detail::decode_url(std::string(name), true);
    (void)httplib::detail::decode_url(std::string(v), true);
  }
  for (size_t at = 0; at <= value.size();) {
    const size_t amp = std::min(value.find('&', at), value.size());
    if (amp > at) expected.append(expected.empty() ? "" : "&").append(value.substr(at, amp - at));
    at = amp + 1;
  }
  if (joined != expected) std::abort();
  return 0;
}
