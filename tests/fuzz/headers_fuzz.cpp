// libFuzzer target: the download headers kforge reads itself (api/http_head.cpp) — Range,
// against a representation of any size, and If-None-Match, against an ETag. The input's
// first 8 bytes are the size, the rest the header's value. Whatever the value, a Range is
// the whole file, one part inside it, or unsatisfiable, never a part past the end; and an
// entity tag always matches itself and "*".
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

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
  return 0;
}
