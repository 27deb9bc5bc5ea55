#include "api/http_head.hpp"

#include <algorithm>
#include <array>
#include <charconv>

namespace kforge::api {
namespace {

constexpr bool is_tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos;
}

// A field value's bytes: visible ASCII, space, tab and obs-text (RFC 9110 §5.5).
constexpr bool is_value_byte(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool fail(HeadError& e, int status, std::string detail) {
  e.status = status;
  e.detail = std::move(detail);
  return false;
}

// The methods cpp-httplib 0.11 parses, and the ones whose body it reads (`expect_content`):
// for the others a body would be read as the next request.
constexpr std::array<std::string_view, 10> kMethods = {"GET",     "HEAD",    "POST",  "PUT",   "DELETE",
                                                       "CONNECT", "OPTIONS", "TRACE", "PATCH", "PRI"};
bool reads_body(std::string_view m) {
  return m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE" || m == "PRI";
}

bool parse_request_line(std::string_view line, RequestHead& r, HeadError& e) {
  if (line.size() + 2 > kMaxHeadLine) return fail(e, 414, "the request line is over 8192 bytes");
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(e, 400, "the request line is not `METHOD SP target SP HTTP-version`, each part split by one space");
  r.method = line.substr(0, sp1);
  r.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  r.version = line.substr(sp2 + 1);
  if (std::find(kMethods.begin(), kMethods.end(), r.method) == kMethods.end())
    return fail(e, 400, "the method is not one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH, PRI (methods are case-sensitive)");
  if (r.version != "HTTP/1.1" && r.version != "HTTP/1.0")
    return fail(e, 400, "the HTTP version is not HTTP/1.1 or HTTP/1.0");
  if (r.target.empty() || r.target.front() != '/')
    return fail(e, 400, "the request target is not a path starting with / (origin-form)");
  for (unsigned char c : r.target) {
    if (c <= 0x20 || c >= 0x7f || c == '#')
      return fail(e, 400, "the request target holds a byte outside visible ASCII or a # (percent-encode it)");
  }
  const size_t q = r.target.find('?');
  if (q != std::string_view::npos && r.target.find('?', q + 1) != std::string_view::npos)
    return fail(e, 400, "the request target holds more than one ?");
  r.path = r.target.substr(0, q);
  return true;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool has_token(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (iequals(trim(list.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

std::vector<std::pair<std::string_view, std::string_view>> split_query(std::string_view target) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view query = target.substr(q + 1);
  while (true) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (!pair.empty()) {
      const size_t eq = pair.find('=');
      out.emplace_back(pair.substr(0, eq), eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

bool none_match(std::string_view value, std::string_view etag) {
  value = trim(value);
  if (value == "*") return true;
  auto opaque = [](std::string_view t) { return t.starts_with("W/") ? t.substr(2) : t; };
  const std::string_view mine = opaque(etag);
  while (!value.empty()) {
    std::string_view tag = opaque(value);
    if (!tag.starts_with('"')) return false;
    const size_t close = tag.find('"', 1);
    if (close == std::string_view::npos) return false;
    if (tag.substr(0, close + 1) == mine) return true;
    value = trim(tag.substr(close + 1));
    if (value.empty()) break;
    if (value.front() != ',') return false;
    value = trim(value.substr(1));
  }
  return false;
}

ByteRange parse_range(std::string_view value, uint64_t size) {
  ByteRange r;
  value = trim(value);
  if (!value.starts_with("bytes=")) return r;
  value = trim(value.substr(6));
  if (value.empty() || value.find(',') != std::string_view::npos) return r;  // one range only
  const size_t dash = value.find('-');
  if (dash == std::string_view::npos) return r;
  auto number = [](std::string_view t, uint64_t& out) {
    if (t.empty() || t.size() > 19 || t.find_first_not_of("0123456789") != std::string_view::npos) return false;
    return std::from_chars(t.data(), t.data() + t.size(), out).ec == std::errc();
  };
  const std::string_view a = value.substr(0, dash), b = value.substr(dash + 1);
  uint64_t first = 0, last = 0;
  if (a.empty()) {  // the last N bytes
    if (!number(b, last)) return r;
    if (last == 0 || size == 0) return {ByteRange::Kind::kUnsatisfiable, 0, 0};
    return {ByteRange::Kind::kPart, size - std::min(last, size), size - 1};
  }
  if (!number(a, first)) return r;
  if (b.empty()) {
    last = size ? size - 1 : 0;
  } else if (!number(b, last) || last < first) {
    return r;
  }
  if (first >= size) return {ByteRange::Kind::kUnsatisfiable, 0, 0};
  return {ByteRange::Kind::kPart, first, std::min(last, size - 1)};
}

std::string_view RequestHead::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (iequals(n, name)) return v;
  return {};
}

bool RequestHead::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return iequals(h.first, name); });
}

HeadScan scan_head(std::string_view buf, size_t max_head) {
  HeadScan s;
  while (buf.substr(s.skip).starts_with("\r\n")) s.skip += 2;
  auto error = [&](int status, const char* detail) {
    s.error = true;
    s.why = {status, detail};
    return s;
  };
  size_t line_start = s.skip, lines = 0;
  for (size_t i = s.skip; i < buf.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(buf[i]);
    if (c == '\0') return error(400, "the request head holds a NUL byte");
    if (c == '\r' && i + 1 < buf.size() && buf[i + 1] != '\n')
      return error(400, "the request head holds a CR not followed by LF");
    // Bytes no request line holds (a TLS hello, binary) are refused as they come, not after
    // the head's timeout; header values may hold obs-text, never control bytes.
    if ((c < 0x20 && c != '\r' && c != '\n' && (lines == 0 || c != '\t')) || c == 0x7f || (lines == 0 && c >= 0x80))
      return error(400, lines == 0 ? "the bytes received are not an HTTP request line" : "a header line holds a control byte");
    if (c != '\n') continue;
    if (i == s.skip || buf[i - 1] != '\r') return error(400, "a line of the request head ends in a bare LF, not CRLF");
    if (i - 1 == line_start) {  // the empty line: the head is complete
      s.size = i + 1 - s.skip;
      return s;
    }
    if (lines == 0) {  // the request line is whole: judge it now
      RequestHead r;
      if (!parse_request_line(buf.substr(line_start, i - 1 - line_start), r, s.why)) {
        s.error = true;
        return s;
      }
    }
    if (++lines > kMaxHeaderLines + 1) return error(400, "the request has more than 100 header lines");
    line_start = i + 1;
  }
  // Incomplete: refuse now what can no longer become a valid head.
  const size_t partial = buf.size() - line_start;
  if (partial > kMaxHeadLine)
    return lines == 0 ? error(414, "the request line is over 8192 bytes") : error(400, "a header line is over 8192 bytes");
  if (buf.size() - s.skip > max_head) return error(400, "the request head is over its size limit");
  return s;
}

bool parse_request_head(std::string_view head, RequestHead& r, HeadError& e) {
  r = RequestHead{};
  size_t eol = head.find("\r\n");
  if (!parse_request_line(head.substr(0, eol), r, e)) return false;
  size_t lengths = 0, encodings = 0, hosts = 0;
  std::string_view length, encoding;
  for (size_t pos = eol == std::string_view::npos ? head.size() : eol + 2; pos < head.size();) {
    size_t end = head.find("\r\n", pos);
    if (end == std::string_view::npos) end = head.size();
    const std::string_view line = head.substr(pos, end - pos);
    pos = end + 2;
    if (line.size() + 2 > kMaxHeadLine) return fail(e, 400, "a header line is over 8192 bytes");
    if (line.empty() || line.front() == ' ' || line.front() == '\t')
      return fail(e, 400, "a header line starts with white space (obs-fold is not accepted)");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return fail(e, 400, "a header line has no colon");
    const std::string_view name = line.substr(0, colon);
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); }))
      return fail(e, 400, "a header name is not a token (or has white space before its colon)");
    const std::string_view value = trim(line.substr(colon + 1));
    if (!std::all_of(value.begin(), value.end(), [](char c) { return is_value_byte(static_cast<unsigned char>(c)); }))
      return fail(e, 400, "the header " + std::string(name) + " holds a control byte");
    if (iequals(name, "Content-Length")) {
      ++lengths;
      length = value;
    } else if (iequals(name, "Transfer-Encoding")) {
      ++encodings;
      encoding = value;
    } else if (iequals(name, "Host")) {
      ++hosts;
    }
    if (value.empty()) {
      if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding"))
        return fail(e, 400, "the header " + std::string(name) + " is empty");
      continue;  // cpp-httplib drops a header without a value: so do we
    }
    if (r.headers.size() == kMaxHeaderLines) return fail(e, 400, "the request has more than 100 header lines");
    r.headers.emplace_back(name, value);
  }
  const bool http11 = r.version == "HTTP/1.1";
  if (http11 && r.header("Host").empty()) return fail(e, 400, "an HTTP/1.1 request needs one Host header");
  if (hosts > 1) return fail(e, 400, "the request has more than one Host header");
  if (lengths > 1) return fail(e, 400, "the request has more than one Content-Length header");
  if (encodings > 1) return fail(e, 400, "the request has more than one Transfer-Encoding header");
  if (lengths && encodings) return fail(e, 400, "the request has both Content-Length and Transfer-Encoding");
  if (encodings) {
    if (!http11) return fail(e, 400, "Transfer-Encoding on an HTTP/1.0 request");
    if (!iequals(encoding, "chunked"))
      return fail(e, 400, "Transfer-Encoding is not `chunked` (the only coding kforge reads)");
    r.framing = RequestHead::Framing::kChunked;
  } else if (lengths) {
    const bool digits = !length.empty() && length.size() <= 18 &&
                        length.find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits) return fail(e, 400, "Content-Length is not a byte count (decimal digits, under 10^18)");
    std::from_chars(length.data(), length.data() + length.size(), r.content_length);
    if (r.content_length > 0) r.framing = RequestHead::Framing::kLength;
  }
  if (r.framing != RequestHead::Framing::kNone && !reads_body(r.method))
    return fail(e, 400, "a " + std::string(r.method) + " request has no body here (Content-Length 0 or none)");
  // cpp-httplib reads a POST without either header to the end of the connection.
  if (r.method == "POST" && !lengths && !encodings)
    return fail(e, 411, "a POST needs Content-Length (or Transfer-Encoding: chunked)");
  // A body kforge would have to decode could fail half-read, leaving the rest unframed;
  // cpp-httplib parses a multipart/form-data body (a Content-Type it reads after decoding
  // percent-escapes) and stops at the first byte it cannot parse.
  for (const auto& [name, value] : r.headers) {
    if (iequals(name, "Content-Encoding") && !iequals(value, "identity"))
      return fail(e, 415, "Content-Encoding " + std::string(value) + ": request bodies are taken as sent, not decoded");
    if (iequals(name, "Content-Type") &&
        (value.find('%') != std::string_view::npos || iequals(value.substr(0, 10), "multipart/")))
      return fail(e, 415, "Content-Type " + std::string(value) + ": request bodies are JSON (no multipart, no % escapes)");
  }
  // HTTP/1.0 connections end after their answer (kforge keeps no 1.0 keep-alive).
  r.keep_alive = http11 && std::none_of(r.headers.begin(), r.headers.end(), [](const auto& h) {
                   return iequals(h.first, "Connection") && has_token(h.second, "close");
                 });
  return true;
}

}  // namespace kforge::api
