// The request-framing cases of issue 41 (docs/SECURITY.md, "Request framing"), shared by
// the framing test (kforge alone) and the cluster test (behind nginx). Each is one request
// whose head kforge must refuse, carrying `smuggled` (another request) where a reader that
// took the framing another way would find it.
#pragma once

#include <string>
#include <vector>

namespace kforge::testing {

struct FramingCase {
  const char* name;
  std::string bytes;
};

inline std::vector<FramingCase> framing_cases(const std::string& smuggled) {
  const std::string cl = "Content-Length: " + std::to_string(smuggled.size()) + "\r\n";
  auto with_body = [&](const std::string& head_lines, const std::string& body) { return head_lines + "\r\n" + body; };
  return {
      {"lower-case method", with_body("post /kernels HTTP/1.1\r\nHost: x\r\n" + cl, smuggled)},
      {"two Content-Lengths", with_body("POST /kernels HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n" + cl, smuggled)},
      {"Content-Length and Transfer-Encoding",
       with_body("POST /kernels HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + cl, smuggled)},
      {"Transfer-Encoding other than chunked",
       with_body("POST /kernels HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n", smuggled)},
      {"chunked on HTTP/1.0", with_body("POST /kernels HTTP/1.0\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n" + smuggled)},
      {"obs-fold", with_body("POST /kernels HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n" + cl, smuggled)},
      {"bare LF", "POST /kernels HTTP/1.1\nHost: x\n" + cl.substr(0, cl.size() - 2) + "\n\n" + smuggled},
      {"header line over the limit",
       with_body("POST /kernels HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(9000, 'a') + "\r\n" + cl, smuggled)},
      {"NUL in a header", with_body("POST /kernels HTTP/1.1\r\nHost: x\r\nX-Nul: a" + std::string(1, '\0') + "b\r\n" + cl, smuggled)},
      {"space before the colon", with_body("POST /kernels HTTP/1.1\r\nHost: x\r\nContent-Length : " +
                                               std::to_string(smuggled.size()) + "\r\n", smuggled)},
      {"Content-Length not digits", with_body("POST /kernels HTTP/1.1\r\nHost: x\r\nContent-Length: +" +
                                                  std::to_string(smuggled.size()) + "\r\n", smuggled)},
      {"a GET with a body", with_body("GET /healthz HTTP/1.1\r\nHost: x\r\n" + cl, smuggled)},
      {"two Host headers", with_body("POST /kernels HTTP/1.1\r\nHost: x\r\nHost: y\r\n" + cl, smuggled)},
      {"no Host on HTTP/1.1", with_body("POST /kernels HTTP/1.1\r\n" + cl, smuggled)},
  };
}

}  // namespace kforge::testing
