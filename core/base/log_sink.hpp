// Where the service's log records go (core/base/log.hpp) once it serves: no write on the
// request's thread: a line goes into the calling thread's own buffer, and one writer
// thread moves every buffer to the file descriptor every 50 ms. flush() and the
// destructor write whatever is left, so a clean shutdown loses nothing; a buffer past
// 4 MiB (a descriptor that does not keep up) is written by its own thread instead, so
// memory stays bounded and nothing is dropped. Lines of one thread keep their order;
// lines of different threads may interleave out of time order (each carries its "ts").
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace kforge::core {

class LogSink {
 public:
  explicit LogSink(int fd = 2);
  ~LogSink();
  LogSink(const LogSink&) = delete;
  LogSink& operator=(const LogSink&) = delete;

  void write(std::string_view line);  // one line, without its newline
  void flush();                       // everything written so far is on the descriptor

 private:
  struct Buffer {
    std::mutex mu;
    std::string text;
  };
  Buffer& local();
  void drain(Buffer& b);  // writes b's text out (takes out_mu_, then b.mu)

  const int fd_;
  const uint64_t id_;
  std::mutex registry_mu_;  // taken once per thread, when it first logs
  std::vector<std::shared_ptr<Buffer>> buffers_;
  std::mutex out_mu_;  // one writer on the descriptor at a time
  std::mutex wake_mu_;
  std::condition_variable_any wake_;
  std::jthread writer_;
};

}  // namespace kforge::core
