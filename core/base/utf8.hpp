// UTF-8 checks for text that reaches JSON. nlohmann::json throws (type_error.316) when it
// dumps a string that is not valid UTF-8, so every byte string from outside — a URL
// parameter, a compiler's log, a kernel's printing — is either refused (a request field) or
// passed through sanitize_utf8() (output) before it enters a json value. utf8_tail() cuts
// a long output on a character boundary, so that a tail never starts mid-character.
// Header-only: the fuzz target builds the request parser from a fixed list of sources.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kforge::core {

// The length of the valid UTF-8 sequence at s[i], or 0 when it is not one (overlong forms,
// surrogates and code points past U+10FFFF included, as RFC 3629 says).
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c == 0xED) n = 3, hi = 0x9F;  // no UTF-16 surrogates
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;  // nothing past U+10FFFF
  else return 0;
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

// The offset of the first byte that is not part of valid UTF-8, or npos.
inline size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

inline bool valid_utf8(std::string_view s) { return invalid_utf8_at(s) == std::string_view::npos; }

// `s` with every byte that does not start a valid sequence replaced by U+FFFD.
inline std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

// At most the last `max_bytes` of `s`, starting on a character boundary, sanitized.
inline std::string utf8_tail(std::string_view s, size_t max_bytes) {
  size_t start = s.size() > max_bytes ? s.size() - max_bytes : 0;
  // Continuation bytes (10xxxxxx) belong to the character before the cut: skip them.
  for (size_t k = 0; k < 3 && start > 0 && start < s.size() &&
                     (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80;
       ++k) {
    ++start;
  }
  return sanitize_utf8(s.substr(start));
}

}  // namespace kforge::core
