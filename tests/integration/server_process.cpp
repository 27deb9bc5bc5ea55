#include "integration/server_process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <stdexcept>

namespace kforge::testing {

ServerProcess::ServerProcess(const std::filesystem::path& cache_dir,
                             const std::filesystem::path& log,
                             std::vector<std::string> extra_args, std::vector<std::string> env) {
  std::vector<std::string> args = {KFORGE_BINARY, "serve",       "--port",
                                   "0",           "--cache-dir", cache_dir.string()};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
  pid_ = ::fork();
  if (pid_ == 0) {
    int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::close(out[0]);
    for (auto& e : env) ::putenv(e.data());
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string line;
  char c;
  while (line.find('\n') == std::string::npos) {
    struct pollfd p {
      out[0], POLLIN, 0
    };
    if (::poll(&p, 1, 60000) <= 0 || ::read(out[0], &c, 1) != 1) break;
    line.push_back(c);
  }
  ::close(out[0]);
  const std::string prefix = "listening on ";
  if (!line.starts_with(prefix)) {
    throw std::runtime_error("kforge serve did not start (see " + log.string() + "); got: " + line);
  }
  url_ = line.substr(prefix.size());
  while (!url_.empty() && (url_.back() == '\n' || url_.back() == '\r')) url_.pop_back();
}

ServerProcess::~ServerProcess() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

void ServerProcess::kill9() {
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

bool ServerProcess::alive() const {
  return pid_ > 0 && ::kill(pid_, 0) == 0;
}

ChildProcess::ChildProcess(std::vector<std::string> args, const std::filesystem::path& log) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
}

ChildProcess::~ChildProcess() { kill(SIGTERM); }

void ChildProcess::kill(int sig) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

bool ChildProcess::alive() const {
  return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("no free port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

bool wait_for_port(int port, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 20) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return true;
    ::poll(nullptr, 0, 20);
  }
  return false;
}

httplib::Client ServerProcess::client() const {
  httplib::Client c(url_);
  c.set_read_timeout(600);
  return c;
}

namespace {
Reply to_reply(const httplib::Result& r) {
  Reply out;
  if (!r) {
    out.raw = "no response: " + httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.raw = r->body;
  out.content_type = r->get_header_value("Content-Type");
  out.body = nlohmann::json::parse(r->body, nullptr, false);
  return out;
}
}  // namespace

Reply post_json(const ServerProcess& s, const std::string& path, const std::string& body) {
  auto c = s.client();
  return to_reply(c.Post(path, body, "application/json"));
}

RawConnection::RawConnection(const ServerProcess& s, const char* from)
    : RawConnection(std::stoi(s.url().substr(s.url().rfind(':') + 1)), from) {}

RawConnection::RawConnection(int port, const char* from) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (from) {
    sockaddr_in src{};
    src.sin_family = AF_INET;
    ::inet_pton(AF_INET, from, &src.sin_addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

RawConnection::~RawConnection() {
  if (fd_ >= 0) ::close(fd_);
}

void RawConnection::send(const std::string& bytes) {
  size_t off = 0;
  while (fd_ >= 0 && off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += size_t(n);
  }
}

void RawConnection::shutdown_write() { ::shutdown(fd_, SHUT_WR); }

bool RawConnection::drain_closed() {
  if (fd_ < 0) return true;
  char buf[4096];
  while (true) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      in_.append(buf, size_t(n));
      continue;
    }
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
}

bool RawConnection::fill(int timeout_s) {
  pollfd p{fd_, POLLIN, 0};
  if (fd_ < 0 || ::poll(&p, 1, timeout_s * 1000) <= 0) return false;
  char buf[16384];
  const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
  if (n <= 0) return false;
  in_.append(buf, size_t(n));
  return true;
}

RawConnection::Answer RawConnection::read_answer(bool head_request, int timeout_s) {
  size_t head_end;
  while ((head_end = in_.find("\r\n\r\n")) == std::string::npos)
    if (!fill(timeout_s)) return {};
  Answer a;
  a.head = in_.substr(0, head_end + 2);
  size_t len = 0;
  if (const auto cl = a.head.find("\r\nContent-Length: "); cl != std::string::npos) len = std::stoul(a.head.substr(cl + 18));
  const int status = a.head.starts_with("HTTP/1.1 ") ? std::stoi(a.head.substr(9, 3)) : -1;
  if (head_request || status == 304) len = 0;
  while (in_.size() < head_end + 4 + len)
    if (!fill(timeout_s)) return {};
  a.body = in_.substr(head_end + 4, len);
  in_.erase(0, head_end + 4 + len);
  a.status = status;
  return a;
}

bool RawConnection::closed_within(int timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return true;
    in_.append(buf, size_t(n));
  }
  return false;
}

Reply get(const ServerProcess& s, const std::string& path, const httplib::Headers& headers) {
  auto c = s.client();
  return to_reply(c.Get(path, headers));
}

double metric(const ServerProcess& s, const std::string& series) {
  auto r = get(s, "/metrics");
  std::istringstream in(r.raw);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  }
  throw std::runtime_error("metric " + series + " not found");
}

nlohmann::json cpu_source_request(const std::string& body, int64_t n, double budget_ms) {
  const std::string source = R"(#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <unistd.h>
#define PT_EXPORT __attribute__((visibility("default")))
extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, void* stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
)" + body + "\n}\n";
  return {{"backend", "cpu"},
          {"source", source},
          {"benchmark",
           {{"inputs", {{{"name", "x"}, {"dtype", "float32"}, {"sizes", {n}}}}},
            {"output", {{"name", "y"}, {"dtype", "float32"}, {"sizes", {n}}}},
            {"extra_args", {n}},
            {"budget_ms", budget_ms}}}};
}

nlohmann::json hit_request() {
  nlohmann::json j = cpu_source_request("for (int64_t i = 0; i < n; ++i) y[i] = x[i];", 64, 1);
  j.erase("benchmark");
  return j;
}

}  // namespace kforge::testing
