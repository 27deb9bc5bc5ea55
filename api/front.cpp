#include "api/front.hpp"

#include <httplib.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <functional>
#include <unordered_map>

namespace kforge::api {

using Clock = std::chrono::steady_clock;

// Answers a connection may have waiting to be sent before its requests are left unread.
constexpr size_t kMaxUnsent = 4 << 20;

struct EventFront::Conn {
  int fd = -1;
  EventFront* front = nullptr;  // set once admitted: the destructor counts it out
  Loop* home = nullptr;
  std::string in;  // received, not yet consumed
  std::string out;  // answers not yet sent
  size_t out_off = 0;
  Clock::time_point last = Clock::now();  // last progress either way
  // The first byte of the request being received (its head's deadline counts from here),
  // and, once its head is complete, the time its body must be in by.
  Clock::time_point started{}, body_deadline{};
  std::string peer_ip, local_ip;
  int peer_port = 0, local_port = 0;
  bool close_after_write = false;
  bool peer_closed = false;  // the client sent EOF: answer what came, then close
  bool client_close = false;  // the request handed to a worker asked `Connection: close`
  // The bytes of `in` (and after it, of the socket) that request takes: a worker that reads
  // another count of them (a handler that left its body unread) ends the connection, and
  // so does a chunked body (npos), whose end only cpp-httplib sees.
  size_t request_len = 0;
  uint32_t events = 0;       // what the loop's epoll waits for on it
  Conn() = default;
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn() {
    if (fd >= 0) ::close(fd);
    if (front) front->release(*this);
  }
};

struct EventFront::Loop {
  int epfd = -1;
  int wake_fd = -1;  // eventfd: inbox has connections, or stop
  std::mutex inbox_mu;
  std::vector<std::unique_ptr<Conn>> inbox;  // accepted, or given back by a worker
  std::unordered_map<Conn*, std::unique_ptr<Conn>> conns;
  std::thread thread;
  bool listens = false;
  Clock::time_point accept_paused_until{};
  bool accept_registered = false;
  ~Loop() {
    conns.clear();
    inbox.clear();
    if (epfd >= 0) ::close(epfd);
    if (wake_fd >= 0) ::close(wake_fd);
  }
};

namespace {

const char* status_text(int status) {
  switch (status) {
    case 200: return "OK";
    case 206: return "Partial Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 503: return "Service Unavailable";
    default: return "Unknown";  // the loop answers nothing else
  }
}

// The milliseconds left until `deadline`, at most `cap_ms` (all of it when there is none).
int ms_until(Clock::time_point deadline, int cap_ms) {
  if (deadline == Clock::time_point{}) return cap_ms;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<long long>(left, 0, cap_ms));
}

std::string ip_of(const sockaddr_storage& a, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &s->sin_addr, buf, sizeof buf);
    port = ntohs(s->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &s->sin6_addr, buf, sizeof buf);
    port = ntohs(s->sin6_port);
  }
  return buf;
}

// Waits for `events` on fd up to timeout_ms; false on timeout or error.
bool wait_for(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  while (true) {
    const int n = ::poll(&p, 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    return n > 0;
  }
}

// An answer's head with `Connection: close` in place of its keep-alive headers.
std::string closing_head(std::string_view head) {
  std::string out;
  out.reserve(head.size() + 19);
  size_t pos = 0;
  for (size_t end; (end = head.find("\r\n", pos)) != std::string_view::npos; pos = end + 2) {
    const std::string_view line = head.substr(pos, end - pos);
    if (line.empty()) break;
    const std::string_view name = line.substr(0, line.find(':'));
    if (pos > 0 && (iequals(name, "Connection") || iequals(name, "Keep-Alive"))) continue;
    out.append(line).append("\r\n");
  }
  out.append("Connection: close\r\n\r\n");
  return out;
}

// A connection as cpp-httplib reads and writes it on a worker: first the bytes the loop
// already received, then the socket. The answer's head is held back until its body's
// first write, so that they go out in one send. A body still arriving at the request's
// body deadline is answered 408 here (the handler's later writes are dropped), and an
// answer to a client that asked `Connection: close` says so, whatever the handler set.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(EventFront::Conn& c, std::string& out, const FrontConfig& config, std::function<void(std::string&)> refuse_late)
      : in_(c.in), out_(out), read_timeout_ms_(config.read_timeout_s * 1000), write_timeout_ms_(config.write_timeout_s * 1000),
        deadline_(c.body_deadline), force_close_(c.client_close), refuse_late_(std::move(refuse_late)),
        peer_ip_(c.peer_ip), local_ip_(c.local_ip), peer_port_(c.peer_port), local_port_(c.local_port), fd_(c.fd) {}
  bool is_readable() const override {
    if (in_off_ < in_.size() || wait_readable()) return true;
    broken_ = true;
    return false;
  }
  bool is_writable() const override { return !failed_; }
  ssize_t read(char* ptr, size_t size) override {
    if (in_off_ < in_.size()) {
      const size_t n = std::min(size, in_.size() - in_off_);
      std::memcpy(ptr, in_.data() + in_off_, n);
      in_off_ += n;
      return ssize_t(n);
    }
    while (true) {
      // A read that times out, fails or meets the end leaves the request unread in part:
      // what follows on the connection is no request boundary, so it is closed afterwards.
      if (!wait_readable()) {
        broken_ = true;
        return -1;
      }
      const ssize_t n = ::recv(fd_, ptr, size, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) broken_ = true;
      if (n > 0) from_socket_ += size_t(n);
      return n;
    }
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (failed_) return -1;
    std::string_view s(ptr, size);
    // The head goes out in one write: a `Connection: close` in it (set by a handler, or
    // by httplib) ends the connection after this answer.
    std::string rewritten;
    const bool final_head = s.starts_with("HTTP/1.") && !s.starts_with("HTTP/1.1 1");
    if (final_head) {
      const size_t end = s.find("\r\n\r\n");
      const std::string_view head = s.substr(0, end == std::string_view::npos ? s.size() : end + 4);
      for (size_t p = head.find("\r\n"); p != std::string_view::npos && p + 2 < head.size(); p = head.find("\r\n", p + 2)) {
        const std::string_view line = head.substr(p + 2, head.find("\r\n", p + 2) - (p + 2));
        if (iequals(line, "Connection: close")) close_ = true;
      }
      if (force_close_ && !close_) {
        rewritten = closing_head(head);
        rewritten.append(s.substr(head.size()));
        s = rewritten;
        close_ = true;
      }
    }
    out_.append(s);
    // A final head waits for the first piece of its body, so that a small answer leaves
    // in one send; everything else goes at once: a streamed body (events, an export) is
    // seen as it is written, and `100 Continue` before the client sends its body.
    if (!final_head && !flush()) return -1;
    return ssize_t(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = peer_ip_;
    port = peer_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = local_ip_;
    port = local_port_;
  }
  socket_t socket() const override { return fd_; }

  bool flush() const {
    size_t off = 0;
    while (off < out_.size() && !failed_) {
      const ssize_t n = ::send(fd_, out_.data() + off, out_.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += size_t(n);
      } else if (n < 0 && errno == EINTR) {
      } else if (n < 0 && errno == EAGAIN) {
        if (!wait_for(fd_, POLLOUT, write_timeout_ms_)) failed_ = true;
      } else {
        failed_ = true;
      }
    }
    out_.clear();
    return !failed_;
  }
  bool close_requested() const { return close_ || failed_ || broken_; }
  bool timed_out() const { return timed_out_; }
  // What was received and not read: the next pipelined request, for the loop.
  std::string rest() const { return in_.substr(in_off_); }
  // The bytes the handler read: from the loop's buffer, then from the socket.
  size_t consumed() const { return in_off_ + from_socket_; }

 private:
  // Waits for the next bytes up to the read timeout, and not past the body's deadline: a
  // request late there is answered 408 now and nothing the handler writes after goes out.
  bool wait_readable() const {
    const int left = ms_until(deadline_, read_timeout_ms_);
    if (wait_for(fd_, POLLIN, left)) return true;
    if (deadline_ != Clock::time_point{} && Clock::now() >= deadline_ && !failed_) {
      timed_out_ = true;
      std::string answer;
      refuse_late_(answer);
      out_.append(answer);
      flush();
      failed_ = true;
    }
    return false;
  }

  std::string& in_;
  std::string& out_;
  size_t in_off_ = 0, from_socket_ = 0;
  int read_timeout_ms_, write_timeout_ms_;
  Clock::time_point deadline_;
  bool force_close_;
  std::function<void(std::string&)> refuse_late_;
  const std::string& peer_ip_;
  const std::string& local_ip_;
  int peer_port_, local_port_;
  int fd_;
  bool close_ = false;
  mutable bool failed_ = false, broken_ = false, timed_out_ = false;
};

}  // namespace

void append_response(std::string& out, const FrontRequest& req, int status,
                     const std::vector<std::pair<std::string_view, std::string_view>>& headers,
                     std::string_view body, int keep_alive_timeout_s) {
  char line[64];
  const int n = std::snprintf(line, sizeof line, "HTTP/1.1 %d %s\r\n", status, status_text(status));
  out.append(line, size_t(n));
  for (const auto& [name, value] : headers) out.append(name).append(": ").append(value).append("\r\n");
  if (req.keep_alive) {
    const int k = std::snprintf(line, sizeof line, "Keep-Alive: timeout=%d, max=10000\r\n", keep_alive_timeout_s);
    out.append(line, size_t(k));
  } else {
    out.append("Connection: close\r\n");
  }
  if (status != 304) {
    char len[24];
    const auto [end, ec] = std::to_chars(len, len + sizeof len, body.size());
    out.append("Content-Length: ").append(len, end).append("\r\n");
  }
  out.append("\r\n");
  if (req.method != "HEAD" && status != 304) out.append(body);
}

EventFront::EventFront(FrontConfig config, FrontHandler& handler) : config_(config), handler_(handler) {
  if (config_.loops == 0) {
    // More loops than cores: the host also runs compilers (and, in a benchmark, the load
    // generator), and a loop that is preempted stalls only its own share of connections.
    // On 2 cores, 8 loops held the p99 of a hit at 64 connections to 2-3 ms where 2 loops
    // gave 7-11 ms (docs/BENCHMARKS.md).
    const size_t cores = std::max(1u, std::thread::hardware_concurrency());
    config_.loops = std::min<size_t>(4 * cores, std::max<size_t>(cores, 32));
  }
  config_.workers = std::max<size_t>(1, config_.workers);
  for (size_t i = 0; i < config_.loops; ++i) {
    auto l = std::make_unique<Loop>();
    l->epfd = ::epoll_create1(EPOLL_CLOEXEC);
    l->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // the wake descriptor
    ::epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wake_fd, &ev);
    l->listens = i == 0;
    loops_.push_back(std::move(l));
  }
}

EventFront::~EventFront() {
  stop();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
  for (auto& l : loops_)
    if (l->thread.joinable()) l->thread.join();
  work_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

core::Result<int> EventFront::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || !res) {
    return core::fail(core::ErrorKind::kInternal, "cannot resolve " + host);
  }
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (a->ai_family == AF_INET6) {
      int no = 0;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
    }
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return core::fail(core::ErrorKind::kInternal, "cannot bind " + host + ":" + service);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int bound = 0;
  ip_of(addr, bound);
  listen_fd_ = fd;
  return bound;
}

void EventFront::run() {
  if (listen_fd_ >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &listen_fd_;
    ::epoll_ctl(loops_[0]->epfd, EPOLL_CTL_ADD, listen_fd_, &ev);
    loops_[0]->accept_registered = true;
  }
  for (size_t i = 0; i < config_.workers; ++i) workers_.emplace_back([this] { worker_main(); });
  for (size_t i = 1; i < loops_.size(); ++i) loops_[i]->thread = std::thread([this, i] { loop_main(*loops_[i]); });
  if (!stopping_) loop_main(*loops_[0]);
  for (size_t i = 1; i < loops_.size(); ++i) loops_[i]->thread.join();
  // Stopped: new connections are refused (a proxy in front tries another instance) while
  // the workers finish the requests they hold.
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  {
    std::lock_guard lock(work_mu_);
    work_cv_.notify_all();
  }
  for (auto& w : workers_) w.join();
  workers_.clear();
}

void EventFront::stop() {
  stopping_ = true;
  for (auto& l : loops_) {
    const uint64_t one = 1;
    if (l->wake_fd >= 0) (void)!::write(l->wake_fd, &one, sizeof one);
  }
  std::lock_guard lock(work_mu_);
  work_cv_.notify_all();
}

EventFront::Counts EventFront::counts() const {
  Counts n{accepted_.load(), fast_.load(), handed_off_.load()};
  {
    std::lock_guard lock(const_cast<std::mutex&>(clients_mu_));
    n.open = open_;
  }
  n.refused_total = refused_total_.load();
  n.refused_per_client = refused_per_client_.load();
  n.bad_requests = bad_requests_.load();
  n.header_timeouts = header_timeouts_.load();
  n.body_timeouts = body_timeouts_.load();
  return n;
}

bool EventFront::admit(Conn& c) {
  std::lock_guard lock(clients_mu_);
  if (config_.max_connections && open_ >= config_.max_connections) {
    refused_total_++;
    return false;
  }
  size_t& mine = clients_[c.peer_ip];
  if (config_.max_connections_per_client && mine >= config_.max_connections_per_client) {
    if (mine == 0) clients_.erase(c.peer_ip);
    refused_per_client_++;
    return false;
  }
  ++mine;
  ++open_;
  c.front = this;
  return true;
}

void EventFront::release(const Conn& c) {
  std::lock_guard lock(clients_mu_);
  --open_;
  if (auto it = clients_.find(c.peer_ip); it != clients_.end() && --it->second == 0) clients_.erase(it);
}

void EventFront::loop_main(Loop& loop) {
  std::vector<epoll_event> events(256);
  auto next_sweep = Clock::now() + std::chrono::seconds(1);
  while (!stopping_) {
    const int n = ::epoll_wait(loop.epfd, events.data(), int(events.size()), 200);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      void* p = events[i].data.ptr;
      if (p == nullptr) {  // woken: adopt what the inbox holds
        uint64_t v;
        (void)!::read(loop.wake_fd, &v, sizeof v);
        std::vector<std::unique_ptr<Conn>> got;
        {
          std::lock_guard lock(loop.inbox_mu);
          got.swap(loop.inbox);
        }
        for (auto& c : got) adopt(loop, std::move(c));
      } else if (p == &listen_fd_) {
        accept_all(loop);
      } else {
        Conn* c = static_cast<Conn*>(p);
        if (!loop.conns.contains(c)) continue;  // closed earlier in this batch
        const uint32_t ev = events[i].events;
        if (ev & EPOLLERR) {
          close_conn(loop, c);
          continue;
        }
        const bool readable = ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP);
        if (ev & EPOLLOUT) {
          if (!flush(loop, c)) continue;
          // Requests left unread while their answers waited are answered now.
          if (!readable && !c->in.empty()) process(loop, c);
        }
        // A hang-up is read too: what arrived before it is still answered (or the read
        // finds the end and closes).
        if (readable) on_readable(loop, c);
      }
    }
    const auto now = Clock::now();
    if (loop.listens && !loop.accept_registered && now >= loop.accept_paused_until) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = &listen_fd_;
      ::epoll_ctl(loop.epfd, EPOLL_CTL_ADD, listen_fd_, &ev);
      loop.accept_registered = true;
    }
    if (now >= next_sweep) {
      sweep(loop);
      next_sweep = now + std::chrono::seconds(1);
    }
  }
  loop.conns.clear();
}

void EventFront::accept_all(Loop& loop) {
  while (true) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop listening a moment instead of spinning on the event.
        ::epoll_ctl(loop.epfd, EPOLL_CTL_DEL, listen_fd_, nullptr);
        loop.accept_registered = false;
        loop.accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
      }
      return;
    }
    int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);  // no delayed-ACK stalls
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->peer_ip = ip_of(peer, c->peer_port);
    sockaddr_storage local{};
    socklen_t llen = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) == 0) c->local_ip = ip_of(local, c->local_port);
    if (!admit(*c)) {
      // Refused at once, never queued: a 503 if the socket takes it without waiting.
      static constexpr std::string_view kBusy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
          "Connection: close\r\nContent-Length: 36\r\n\r\ntoo many connections from this client";
      (void)!::send(fd, kBusy.data(), kBusy.size() - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      continue;
    }
    accepted_++;
    Loop& home = *loops_[next_loop_++ % loops_.size()];
    c->home = &home;
    if (&home == &loop) {
      adopt(loop, std::move(c));
    } else {
      {
        std::lock_guard lock(home.inbox_mu);
        home.inbox.push_back(std::move(c));
      }
      const uint64_t one = 1;
      (void)!::write(home.wake_fd, &one, sizeof one);
    }
  }
}

void EventFront::adopt(Loop& loop, std::unique_ptr<Conn> c) {
  if (stopping_) return;  // closed as it goes
  Conn* p = c.get();
  p->last = Clock::now();
  if (!p->in.empty()) p->started = p->last;  // a pipelined request the worker did not read
  p->events = EPOLLIN | EPOLLRDHUP;
  epoll_event ev{};
  ev.events = p->events;
  ev.data.ptr = p;
  if (::epoll_ctl(loop.epfd, EPOLL_CTL_ADD, p->fd, &ev) != 0) return;
  loop.conns.emplace(p, std::move(c));
  if (!p->in.empty()) process(loop, p);  // a pipelined request the worker did not read
}

void EventFront::on_readable(Loop& loop, Conn* c) {
  char buf[64 << 10];
  while (true) {
    const ssize_t n = ::recv(c->fd, buf, sizeof buf, 0);
    if (n > 0) {
      c->last = Clock::now();
      if (c->in.empty()) c->started = c->last;  // a new request's first byte
      c->in.append(buf, size_t(n));
      if (size_t(n) < sizeof buf) break;
      continue;
    }
    if (n == 0) {  // half-closed: what came is still answered
      c->peer_closed = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) break;
    close_conn(loop, c);  // reset: nobody reads an answer
    return;
  }
  process(loop, c);
}

void EventFront::process(Loop& loop, Conn* c) {
  FrontRequest r;
  r.remote_addr = c->peer_ip;
  // Rounds: answer what is buffered until the unsent answers pass kMaxUnsent, send, and go
  // on if that emptied them (no event would come for requests already read).
  while (true) {
    size_t consumed = 0;
    bool handoff = false, backlog = false;
    while (!c->close_after_write) {
      if (c->out.size() - c->out_off > kMaxUnsent) {
        backlog = true;
        break;
      }
      std::string_view buf = std::string_view(c->in).substr(consumed);
      if (buf.empty()) break;
      const HeadScan scan = scan_head(buf, config_.max_head);
      HeadError bad = scan.why;
      if (scan.error || (scan.size && !parse_request_head(buf.substr(scan.skip, scan.size - 4), r, bad))) {
        bad_requests_++;
        return refuse(loop, c, {bad.status, bad.detail, c->peer_ip, r.method, r.target, ""});
      }
      consumed += scan.skip;  // empty lines before a request are read and dropped
      buf.remove_prefix(scan.skip);
      if (!scan.size) break;  // the head is still coming
      const size_t head_len = scan.size;
      // Only GET, HEAD and POST have routes: the others are answered here, whatever their
      // body, so cpp-httplib never frames a method it would read differently.
      if (r.method != "GET" && r.method != "HEAD" && r.method != "POST") {
        const std::string allow = handler_.allowed(r.path);
        return refuse(loop, c, {allow.empty() ? 404 : 405,
                                allow.empty() ? "no route for this path" : "this path takes " + allow + " only",
                                c->peer_ip, r.method, r.target, allow});
      }
      c->request_len = r.framing == RequestHead::Framing::kChunked ? std::string::npos : head_len + r.content_length;
      const bool buffered_body = r.framing == RequestHead::Framing::kNone ||
                                 (r.framing == RequestHead::Framing::kLength && r.content_length <= config_.max_fast_body &&
                                  !r.has_header("Expect"));
      if (!buffered_body) {  // a large or chunked body, or one the client sends after `100 Continue`
        c->client_close = !r.keep_alive || r.framing == RequestHead::Framing::kChunked;
        c->body_deadline = body_deadline(r.framing == RequestHead::Framing::kLength ? r.content_length : config_.max_body);
        handoff = true;
        break;
      }
      const size_t total = head_len + r.content_length;
      if (buf.size() < total) {  // the body is still coming: on the loop, not on a worker
        if (c->body_deadline == Clock::time_point{}) c->body_deadline = body_deadline(r.content_length);
        break;
      }
      r.body = buf.substr(head_len, r.content_length);
      if (r.version != "HTTP/1.1" || !handler_.fast_candidate(r)) {
        c->client_close = !r.keep_alive;
        c->body_deadline = {};
        handoff = true;
        break;
      }
      const size_t before = c->out.size();
      if (!handler_.answer_fast(r, c->out)) {
        c->out.resize(before);
        c->client_close = !r.keep_alive;
        c->body_deadline = {};
        handoff = true;
        break;
      }
      fast_++;
      consumed += total;
      c->body_deadline = {};
      c->started = Clock::now();  // of what follows, if anything
      if (!r.keep_alive) c->close_after_write = true;
    }
    if (consumed) c->in.erase(0, consumed);
    if (handoff) return hand_off(loop, c);
    if (c->peer_closed && !backlog) c->close_after_write = true;
    if (!flush(loop, c) || !backlog || c->out_off < c->out.size()) return;
  }
}

Clock::time_point EventFront::body_deadline(uint64_t bytes) const {
  const double seconds = config_.body_timeout_s + double(bytes) / double(std::max<size_t>(1, config_.min_body_rate));
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void EventFront::refuse(Loop& loop, Conn* c, const FrontRefusal& why) {
  handler_.refuse(why, c->out);
  c->in.clear();
  c->close_after_write = true;
  flush(loop, c);
}

bool EventFront::flush(Loop& loop, Conn* c) {
  while (c->out_off < c->out.size()) {
    const ssize_t n = ::send(c->fd, c->out.data() + c->out_off, c->out.size() - c->out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c->out_off += size_t(n);
      c->last = Clock::now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      watch(loop, c, true);
      return true;
    }
    close_conn(loop, c);
    return false;
  }
  c->out.clear();
  c->out_off = 0;
  watch(loop, c, false);
  if (c->close_after_write) {
    close_conn(loop, c);
    return false;
  }
  return true;
}

void EventFront::watch(Loop& loop, Conn* c, bool write) {
  // After the client's EOF the descriptor stays readable: only writability is waited for.
  // A client that sends requests and does not read the answers is not read from either
  // while kMaxUnsent of them wait (then the write timeout drops it).
  const bool read = !c->peer_closed && c->out.size() - c->out_off <= kMaxUnsent;
  const uint32_t events = (read ? uint32_t(EPOLLIN | EPOLLRDHUP) : 0u) | (write ? uint32_t(EPOLLOUT) : 0u);
  if (events == c->events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = c;
  ::epoll_ctl(loop.epfd, EPOLL_CTL_MOD, c->fd, &ev);
  c->events = events;
}

void EventFront::close_conn(Loop& loop, Conn* c) {
  ::epoll_ctl(loop.epfd, EPOLL_CTL_DEL, c->fd, nullptr);
  loop.conns.erase(c);  // ~Conn closes it
}

void EventFront::hand_off(Loop& loop, Conn* c) {
  ::epoll_ctl(loop.epfd, EPOLL_CTL_DEL, c->fd, nullptr);
  auto node = loop.conns.extract(c);
  handed_off_++;
  {
    std::lock_guard lock(work_mu_);
    work_.push_back(std::move(node.mapped()));
  }
  work_cv_.notify_one();
}

void EventFront::sweep(Loop& loop) {
  const auto now = Clock::now();
  std::vector<Conn*> expired, late;
  for (auto& [p, c] : loop.conns) {
    if (c->out_off < c->out.size()) {  // an answer the client does not read
      if (now - c->last > std::chrono::seconds(config_.write_timeout_s)) expired.push_back(p);
    } else if (c->in.empty()) {  // idle between requests
      if (now - c->last > std::chrono::seconds(config_.keep_alive_timeout_s)) expired.push_back(p);
    } else if (c->body_deadline != Clock::time_point{} ? now >= c->body_deadline
                                                       : now - c->started > std::chrono::seconds(config_.header_timeout_s)) {
      late.push_back(p);  // a request that has not arrived in time, however it trickles
    } else if (now - c->last > std::chrono::seconds(config_.read_timeout_s)) {
      expired.push_back(p);  // a partial request that stopped
    }
  }
  for (Conn* p : expired) close_conn(loop, p);
  for (Conn* p : late) {
    const bool body = p->body_deadline != Clock::time_point{};
    (body ? body_timeouts_ : header_timeouts_)++;
    refuse(loop, p, {408, body ? "the request body did not arrive in time" : "the request head did not arrive in time",
                     p->peer_ip, "", "", ""});
    if (loop.conns.contains(p)) close_conn(loop, p);  // the 408 could not all be sent: no waiting for it
  }
}

void EventFront::worker_main() {
  while (true) {
    std::unique_ptr<Conn> c;
    {
      std::unique_lock lock(work_mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !work_.empty(); });
      if (work_.empty()) return;  // stopping, nothing left
      c = std::move(work_.front());
      work_.pop_front();
    }
    if (stopping_) continue;  // closed as it goes
    std::string out = std::move(c->out);
    out.erase(0, c->out_off);  // answers the loop had not sent yet go first
    c->out.clear();
    c->out_off = 0;
    ConnStream s(*c, out, config_, [this, &c](std::string& answer) {
      body_timeouts_++;
      handler_.refuse({408, "the request body did not arrive in time", c->peer_ip, "", "", ""}, answer);
    });
    bool keep = s.flush();
    if (keep) keep = handler_.serve(s);
    keep = s.flush() && keep && !s.close_requested() && !stopping_ && s.consumed() == c->request_len;
    if (!keep) continue;  // closed as it goes
    c->in = s.rest();
    c->client_close = false;
    c->body_deadline = {};
    give_back(std::move(c));
  }
}

void EventFront::give_back(std::unique_ptr<Conn> c) {
  Loop& home = *c->home;
  {
    std::lock_guard lock(home.inbox_mu);
    home.inbox.push_back(std::move(c));
  }
  const uint64_t one = 1;
  (void)!::write(home.wake_fd, &one, sizeof one);
}

}  // namespace kforge::api
