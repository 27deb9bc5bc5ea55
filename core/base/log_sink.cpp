#include "core/base/log_sink.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <utility>

namespace kforge::core {
namespace {

constexpr size_t kSyncAbove = 4 << 20;

std::atomic<uint64_t> next_id{1};

}  // namespace

LogSink::LogSink(int fd)
    : fd_(fd), id_(next_id.fetch_add(1)), writer_([this](std::stop_token stop) {
        while (!stop.stop_requested()) {
          {
            std::unique_lock lock(wake_mu_);
            wake_.wait_for(lock, stop, std::chrono::milliseconds(50), [] { return false; });
          }
          flush();
        }
      }) {}

LogSink::~LogSink() {
  writer_.request_stop();
  writer_.join();
  flush();
}

LogSink::Buffer& LogSink::local() {
  // A thread's buffer for each sink it has written to, found by the sink's id (an address
  // may be reused by a later sink; an id is not).
  thread_local std::vector<std::pair<uint64_t, std::shared_ptr<Buffer>>> mine;
  for (auto& [id, b] : mine) {
    if (id == id_) return *b;
  }
  auto b = std::make_shared<Buffer>();
  {
    std::lock_guard lock(registry_mu_);
    buffers_.push_back(b);
  }
  mine.emplace_back(id_, b);
  return *b;
}

void LogSink::write(std::string_view line) {
  Buffer& b = local();
  size_t pending;
  {
    std::lock_guard lock(b.mu);
    b.text.append(line);
    b.text.push_back('\n');
    pending = b.text.size();
  }
  if (pending > kSyncAbove) drain(b);
}

void LogSink::drain(Buffer& b) {
  // The descriptor's lock is taken before the swap: whoever takes a buffer's text first
  // also writes it first, so a thread's lines stay in order.
  std::lock_guard out(out_mu_);
  std::string text;
  {
    std::lock_guard lock(b.mu);
    text.swap(b.text);
  }
  std::string_view bytes = text;
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed or broken descriptor: nothing more can be written
    bytes.remove_prefix(size_t(n));
  }
}

void LogSink::flush() {
  std::vector<std::shared_ptr<Buffer>> all;
  {
    std::lock_guard lock(registry_mu_);
    all = buffers_;
  }
  for (const auto& b : all) drain(*b);
}

}  // namespace kforge::core
