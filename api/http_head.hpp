// An HTTP/1.1 request head as kforge frames it (RFC 9112), strictly: the one parser every
// request on the plain-HTTP port passes before anything answers it (api/front.cpp).
//
// Whatever it does not take as plainly valid is an error with the status to answer and a
// detail naming what was wrong; the caller then answers once and closes the connection,
// since after a head it cannot read it no longer knows where the next request starts (the
// desync that request smuggling behind a proxy relies on). What it refuses:
//   - a line not ended by CRLF (a bare LF or a lone CR), a NUL or another control byte;
//   - a request line other than `METHOD SP origin-form SP HTTP/1.0|HTTP/1.1`, a method
//     outside cpp-httplib's set (methods are case-sensitive: `post` is not POST), a target
//     with bytes outside visible ASCII, a `#`, or more than one `?`;
//   - a header line that starts with white space (obs-fold), a name that is not a token
//     or is followed by white space before its colon;
//   - framing that is not one of: no body; one `Content-Length` of decimal digits; one
//     `Transfer-Encoding: chunked` without Content-Length, on HTTP/1.1;
//   - a body on a method cpp-httplib does not read one for (GET, HEAD, OPTIONS, CONNECT,
//     TRACE): it would be taken for the next request;
//   - no `Host`, or more than one, on HTTP/1.1;
//   - a POST with neither Content-Length nor Transfer-Encoding (411: cpp-httplib would read
//     to the end of the connection), a Content-Encoding other than identity (415);
//   - a line over 8,192 bytes (the request line: 414), more than 100 header lines.
// Everything it accepts, cpp-httplib 0.11's parser accepts with the same method, target,
// headers (whose values httplib URL-decodes, and drops when empty: so does this parser,
// before decoding) and framing: tests/fuzz/http_head_fuzz.cpp checks that on every input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kforge::api {

inline constexpr size_t kMaxHeadLine = 8192;   // cpp-httplib's line limits
inline constexpr size_t kMaxHeaderLines = 100;

struct HeadError {
  int status = 400;
  std::string detail;
};

// One request head: views into the bytes it was parsed from.
struct RequestHead {
  std::string_view method, target, version;
  std::string_view path;  // the target up to its `?`
  std::vector<std::pair<std::string_view, std::string_view>> headers;  // values trimmed
  enum class Framing { kNone, kLength, kChunked } framing = Framing::kNone;
  uint64_t content_length = 0;  // with Framing::kLength
  bool keep_alive = true;       // HTTP/1.1 without a `close` token in `Connection`

  // The first value of a header, its name matched without regard to case; "" if absent.
  std::string_view header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

// Where the head at the start of `buf` ends. `skip` leading empty lines (RFC 9112 §2.2
// lets a server ignore them) come first; `size` is the head's length after them, its final
// empty line included, or 0 while it is incomplete. `error` is set for bytes that already
// cannot be a head (a bare LF, a lone CR, NUL) or a head over `max_head` bytes.
struct HeadScan {
  size_t skip = 0;
  size_t size = 0;
  bool error = false;
  HeadError why;
};
HeadScan scan_head(std::string_view buf, size_t max_head);

// Parses a head that scan_head() delimited (its bytes up to, not including, the final
// empty line's CRLF pair: "line\r\nline"). False with `error` set when it is not valid.
bool parse_request_head(std::string_view head, RequestHead& out, HeadError& error);

bool iequals(std::string_view a, std::string_view b);

// If-None-Match (RFC 9110 §13.1.2): whether `value` ("*" or a list of entity-tags, weak or
// strong, compared weakly) names `etag` (a quoted strong tag). A malformed list matches
// nothing: the file is sent.
bool none_match(std::string_view value, std::string_view etag);

// Range (RFC 9110 §14.2) of a representation of `size` bytes. One byte range is served
// ("bytes=A-B", "bytes=A-", "bytes=-N"); a Range this server ignores — another unit, a
// malformed value, several ranges — is kWhole (200 with the whole file, as the RFC allows);
// a range that starts past the end is kUnsatisfiable (416, `Content-Range: bytes */size`).
struct ByteRange {
  enum class Kind { kWhole, kPart, kUnsatisfiable } kind = Kind::kWhole;
  uint64_t first = 0, last = 0;  // with kPart: bytes first..last, both included
};
ByteRange parse_range(std::string_view value, uint64_t size);

// Whether a comma-separated header value (Connection, If-None-Match...) holds `token`,
// compared without regard to case.
bool has_token(std::string_view list, std::string_view token);

// The query of a request target as (name, value) pairs in order, not yet percent-decoded:
// split at every `&` (empty pairs skipped) and each pair at its first `=` only, so that
// `match=backend=cpu` is ("match", "backend=cpu") as the docs write it (httplib's own
// params keep the part after the last `=`). A pair without `=` has an empty value.
std::vector<std::pair<std::string_view, std::string_view>> split_query(std::string_view target);

}  // namespace kforge::api
