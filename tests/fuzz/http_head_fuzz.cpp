// libFuzzer target: the event front's request-head parser (api/http_head.cpp) on arbitrary
// bytes, differentially against cpp-httplib's own parser, which serves every request the
// front hands to a worker. For each head the front accepts with a method it hands on (GET,
// HEAD, POST; it answers the others itself), httplib must parse the same method, target
// and headers (httplib URL-decodes header values), and read exactly the bytes the front
// counts for the request: the head, then Content-Length bytes of body. A disagreement
// there is a request-smuggling desync, and aborts.
#include <httplib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "api/http_head.hpp"

namespace {

using namespace kforge::api;

class Core : public httplib::Server {
 public:
  using httplib::Server::process_request;
};

// A connection's bytes, as httplib reads them from a socket.
class MemStream final : public httplib::Stream {
 public:
  explicit MemStream(std::string_view in) : in_(in) {}
  bool is_readable() const override { return off_ < in_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, in_.size() - off_);
    std::memcpy(ptr, in_.data() + off_, n);
    off_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char*, size_t size) override { return ssize_t(size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 1;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 2;
  }
  socket_t socket() const override { return 0; }
  size_t consumed() const { return off_; }

 private:
  std::string_view in_;
  size_t off_ = 0;
};

struct Seen {
  bool parsed = false;
  std::string method, target;
  std::multiset<std::pair<std::string, std::string>> headers;
};
Seen seen;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

[[noreturn]] void disagree(const char* what, std::string_view front, std::string_view httplib) {
  std::fprintf(stderr, "http_head_fuzz: the front and httplib disagree on %s:\n  front:   %.*s\n  httplib: %.*s\n", what,
               int(front.size()), front.data(), int(httplib.size()), httplib.data());
  std::abort();
}

Core& core() {
  static Core* c = [] {
    auto* s = new Core;
    s->set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
      seen.parsed = true;
      seen.method = req.method;
      seen.target = req.target;
      for (const auto& [name, value] : req.headers) seen.headers.emplace(lower(name), value);
      // The four httplib adds itself (a client may send its own beside them).
      for (const auto& own : {std::pair<std::string, std::string>{"remote_addr", "127.0.0.1"}, {"remote_port", "1"},
                              {"local_addr", "127.0.0.1"}, {"local_port", "2"}}) {
        if (auto it = seen.headers.find(own); it != seen.headers.end()) seen.headers.erase(it);
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    auto ok = [](const httplib::Request&, httplib::Response& res) { res.status = 200; };
    s->Get(".*", ok);
    s->Post(".*", ok);
    return s;
  }();
  return *c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const HeadScan scan = scan_head(in, 64 << 10);
  if (scan.error) {
    if (scan.why.status < 400 || scan.why.status > 499 || scan.why.detail.empty()) std::abort();
    return 0;
  }
  if (!scan.size) return 0;
  if (scan.skip + scan.size > in.size() || !in.substr(scan.skip, scan.size).ends_with("\r\n\r\n")) std::abort();
  RequestHead r;
  HeadError e;
  if (!parse_request_head(in.substr(scan.skip, scan.size - 4), r, e)) {
    if (e.status < 400 || e.status > 499 || e.detail.empty()) std::abort();
    return 0;
  }
  if (r.method != "GET" && r.method != "HEAD" && r.method != "POST") return 0;

  const std::string_view request = in.substr(scan.skip);
  MemStream s(request);
  seen = {};
  bool closed = false;
  core().process_request(s, false, closed, nullptr);
  if (!seen.parsed) disagree("whether the head is valid", "valid", "refused");
  if (seen.method != r.method) disagree("the method", r.method, seen.method);
  if (seen.target != r.target) disagree("the target", r.target, seen.target);
  std::multiset<std::pair<std::string, std::string>> mine;
  for (const auto& [name, value] : r.headers)
    mine.emplace(lower(name), httplib::detail::decode_url(std::string(value), false));
  if (mine != seen.headers) {
    std::string a, b;
    for (const auto& [n, v] : mine) a += n + ": " + v + " | ";
    for (const auto& [n, v] : seen.headers) b += n + ": " + v + " | ";
    disagree("the headers", a, b);
  }
  // httplib alone finds a chunked body's end (it reads `chunked` without regard to case, as
  // the front does), and the front closes the connection after it.
  if (r.framing == RequestHead::Framing::kChunked) return 0;
  const size_t expected = scan.size + (r.method == "POST" ? r.content_length : 0);
  if (request.size() >= expected && s.consumed() != expected) {
    const std::string a = std::to_string(expected), b = std::to_string(s.consumed());
    disagree("where the request ends (bytes)", a, b);
  }
  return 0;
}
