// The event-driven HTTP/1.1 front of the plain-HTTP server (issue 12). A few epoll loops
// own the listening socket and every keep-alive connection; they parse each request head
// themselves and
//   - answer on the loop thread what the handler can answer from memory (a cache hit: an
//     artifact download, a POST /kernels whose bytes were seen before), with no thread
//     switch and no lock that other requests wait on;
//   - hand the connection to a bounded pool of workers for everything else: the worker
//     runs cpp-httplib's own request processing (routing, body reading, problem answers,
//     streamed bodies) over the connection for that one request, then gives the
//     connection back to its loop.
// So an idle keep-alive connection holds no thread, a build farm's hits cost what parsing
// and one send cost, and every other route behaves exactly as cpp-httplib serves it.
// HTTPS is served by cpp-httplib alone (its SSLServer); this front is plain HTTP.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/http_head.hpp"
#include "core/base/error.hpp"

namespace httplib {
class Stream;
}

namespace kforge::api {

// One request as the front parsed it (api/http_head.hpp): views into the connection's
// buffer, valid during the call that receives it.
struct FrontRequest : RequestHead {
  std::string_view body;
  std::string_view remote_addr;
};

// A request the front answers itself and then closes the connection after: a head it
// cannot parse or frame (400, 414), or a head or body that missed its deadline (408).
struct FrontRefusal {
  int status = 400;
  std::string_view detail;
  std::string_view remote_addr;
  std::string_view method, target;  // "" when the head was not parsed
  std::string_view allow;           // 405: the methods the path takes
};

// Appends one whole HTTP/1.1 response to `out`: status line, the given headers,
// Content-Length, the connection header cpp-httplib would send, and the body (none for
// HEAD, whose Content-Length is still the body's).
void append_response(std::string& out, const FrontRequest& req, int status,
                     const std::vector<std::pair<std::string_view, std::string_view>>& headers,
                     std::string_view body, int keep_alive_timeout_s);

class FrontHandler {
 public:
  virtual ~FrontHandler() = default;
  // Called on a loop thread with a complete head (body not read yet): whether it may be
  // answered on the loop. Its body, when it has one, is then read into memory first.
  virtual bool fast_candidate(const FrontRequest& head) = 0;
  // On a loop thread, with the body: append the whole response to `out` and return true,
  // or return false (nothing appended) to have a worker serve it instead.
  virtual bool answer_fast(const FrontRequest& req, std::string& out) = 0;
  // On a worker thread: read one request from `stream`, serve it, write the answer.
  // Returns false when the connection must be closed afterwards.
  virtual bool serve(httplib::Stream& stream) = 0;
  // On a loop or worker thread: append the whole answer to a refused request (it must say
  // `Connection: close`; the front closes the connection after it) and log it.
  virtual void refuse(const FrontRefusal& why, std::string& out) = 0;
  // The methods a path is served for ("GET, HEAD", "POST"), "" when no route has it: a
  // request with another method is answered 405 (or 404) by the front itself.
  virtual std::string allowed(std::string_view path) const = 0;
};

struct FrontConfig {
  size_t loops = 0;    // event loops (0: 4 per core, at most max(cores, 32))
  size_t workers = 64;  // requests served at once off the loops (builds wait on these)
  int read_timeout_s = 30;   // a partial request that sends nothing for this long is dropped
  int write_timeout_s = 30;  // ... and an answer the client does not read
  int keep_alive_timeout_s = 5;  // an idle connection is closed after this
  // Slow clients (docs/SECURITY.md, "Slow clients"): a request's head must be complete
  // this long after its first byte, and its body by body_timeout_s plus its length at
  // min_body_rate bytes a second after the head (a chunked body: at most max_body bytes).
  int header_timeout_s = 30;
  int body_timeout_s = 30;
  size_t min_body_rate = 64 << 10;
  size_t max_body = 4 << 20;
  size_t max_fast_body = 1 << 20;  // bodies up to this are read on the loop, larger ones by the worker
  size_t max_head = 64 << 10;      // a longer head is refused
  // Connections open at once: in all and per client address (0: no cap). Beyond either a
  // new connection is closed at once, after a 503 if the socket takes it.
  size_t max_connections = 0;
  size_t max_connections_per_client = 0;
};

class EventFront {
 public:
  EventFront(FrontConfig config, FrontHandler& handler);
  ~EventFront();
  EventFront(const EventFront&) = delete;
  EventFront& operator=(const EventFront&) = delete;

  // Listens on host:port (0 picks a free port); returns the bound port.
  core::Result<int> bind(const std::string& host, int port);
  int listening() const { return listen_fd_; }  // the socket bind() made
  void run();   // serves until stop(); returns once every worker is done
  void stop();  // from any thread

  struct Counts {
    uint64_t connections = 0, fast = 0, handed_off = 0;
    uint64_t open = 0;                                    // connections open now
    uint64_t refused_total = 0, refused_per_client = 0;   // over max_connections[_per_client]
    uint64_t bad_requests = 0;                            // heads refused (400, 414)
    uint64_t header_timeouts = 0, body_timeouts = 0;      // 408s
  };
  Counts counts() const;

  struct Conn;
  struct Loop;

 private:
  void loop_main(Loop& loop);
  void accept_all(Loop& loop);
  void adopt(Loop& loop, std::unique_ptr<Conn> c);
  void on_readable(Loop& loop, Conn* c);
  void process(Loop& loop, Conn* c);  // parses and answers what is buffered
  bool flush(Loop& loop, Conn* c);     // false: the connection was closed
  void watch(Loop& loop, Conn* c, bool write);  // the events its loop waits for
  void close_conn(Loop& loop, Conn* c);
  void hand_off(Loop& loop, Conn* c);
  // Answers a refused request after what the connection already owes, and closes it.
  void refuse(Loop& loop, Conn* c, const FrontRefusal& why);
  // When a body of `bytes` whose head is complete now must have arrived.
  std::chrono::steady_clock::time_point body_deadline(uint64_t bytes) const;
  void sweep(Loop& loop);  // timeouts
  bool admit(Conn& c);     // counts a new connection against the caps; false: refused
  void release(const Conn& c);  // from ~Conn
  void worker_main();
  void give_back(std::unique_ptr<Conn> c);  // from a worker to the connection's loop

  FrontConfig config_;
  FrontHandler& handler_;
  int listen_fd_ = -1;
  // Open connections per client address (before loops_ and work_: a Conn's destructor
  // counts itself out here).
  std::mutex clients_mu_;
  std::unordered_map<std::string, size_t> clients_;
  size_t open_ = 0;
  std::vector<std::unique_ptr<Loop>> loops_;
  std::atomic<size_t> next_loop_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> accepted_{0}, fast_{0}, handed_off_{0};
  std::atomic<uint64_t> refused_total_{0}, refused_per_client_{0}, bad_requests_{0};
  std::atomic<uint64_t> header_timeouts_{0}, body_timeouts_{0};

  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::deque<std::unique_ptr<Conn>> work_;
  std::vector<std::thread> workers_;
};

}  // namespace kforge::api
