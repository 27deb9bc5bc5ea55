// Starts the real `kforge serve --port 0` as a child process and waits until it prints
// its address (never sleeps). kClockAhead in `env` runs its store's clock 2 s ahead
// (KFORGE_TEST_CLOCK_OFFSET_MS): a file just written counts as old enough for its
// verification to be memoised, with no second to wait out. The destructor stops it with SIGTERM; kill9() simulates a
// crash. Its stderr goes to <scratch>/server.<n>.log for post-mortems.
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kforge::testing {

inline const std::string kClockAhead = "KFORGE_TEST_CLOCK_OFFSET_MS=2000";

class ServerProcess {
 public:
  // `env`: NAME=VALUE pairs added to the server's environment.
  ServerProcess(const std::filesystem::path& cache_dir, const std::filesystem::path& log,
                std::vector<std::string> extra_args = {}, std::vector<std::string> env = {});
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& url() const { return url_; }
  httplib::Client client() const;
  void kill9();
  bool alive() const;

 private:
  pid_t pid_ = -1;
  std::string url_;
};

// Any other program a test needs running beside it (redis-server, nginx): started with its
// output in `log`, stopped with SIGTERM (or kill()) when the object goes.
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, const std::filesystem::path& log);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  void kill(int sig);  // and waits for it
  bool alive() const;

 private:
  pid_t pid_ = -1;
};

// A TCP port nothing listens on now (bound and released; the usual small race).
int free_port();
// Waits until something accepts connections on 127.0.0.1:port (false after `timeout_ms`).
bool wait_for_port(int port, int timeout_ms = 10000);

// One TCP connection to a server, written and read byte for byte (pipelining, half-close,
// a request cut short): what an HTTP client library would not send.
class RawConnection {
 public:
  explicit RawConnection(const ServerProcess& s) : RawConnection(s, nullptr) {}
  // From the loopback address `from` (e.g. "127.0.0.2"): another client address.
  RawConnection(const ServerProcess& s, const char* from);
  RawConnection(int port, const char* from);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  bool connected() const { return fd_ >= 0; }
  void send(const std::string& bytes);
  void shutdown_write();
  struct Answer {
    int status = 0;  // 0: the connection ended (or `timeout_s` passed) before a whole answer
    std::string head, body;
  };
  // The next whole answer (its body by Content-Length; none for 304 or after HEAD).
  Answer read_answer(bool head_request = false, int timeout_s = 20);
  // Whether the server closes the connection within `timeout_s`; what arrives meanwhile
  // is kept (unread()).
  bool closed_within(int timeout_s);
  // Received and not returned by read_answer().
  const std::string& unread() const { return in_; }
  // Reads what has arrived (into unread()) without waiting; true once the server closed.
  bool drain_closed();

 private:
  bool fill(int timeout_s);  // reads more; false on EOF, error or timeout
  int fd_ = -1;
  std::string in_;
};

struct Reply {
  int status = 0;
  nlohmann::json body;
  std::string raw;
  std::string content_type;
};

Reply post_json(const ServerProcess& s, const std::string& path, const std::string& body);
Reply get(const ServerProcess& s, const std::string& path, const httplib::Headers& headers = {});
double metric(const ServerProcess& s, const std::string& series);

// A source-mode cpu request whose kernel takes (const float* x, float* y, int64_t n, ...) and
// runs `body` (which may use <cstdio>, <cstdlib>, <ctime> and <unistd.h>), benchmarked on n floats.
nlohmann::json cpu_source_request(const std::string& body, int64_t n, double budget_ms);
// A cpu source request without a benchmark: once built, POSTing its bytes again is a hit
// the event front answers on its loop.
nlohmann::json hit_request();

}  // namespace kforge::testing
