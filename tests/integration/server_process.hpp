// Starts the real `kforge serve --port 0` as a child process and waits until it prints
// its address (never sleeps). The destructor stops it with SIGTERM; kill9() simulates a
// crash. Its stderr goes to <scratch>/server.<n>.log for post-mortems.
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kforge::testing {

class ServerProcess {
 public:
  ServerProcess(const std::filesystem::path& cache_dir, const std::filesystem::path& log,
                std::vector<std::string> extra_args = {});
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

}  // namespace kforge::testing
