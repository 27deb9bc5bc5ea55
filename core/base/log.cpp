#include "core/base/log.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>
#include <vector>

#include "core/base/log_sink.hpp"
#include "core/base/utf8.hpp"

namespace kforge::core::log {
namespace {

struct State {
  std::atomic<Format> format{Format::kJson};
  std::atomic<Level> min{Level::kInfo};
  std::mutex sink_mu;  // start_async/stop_async against each other
  std::unique_ptr<LogSink> owned;
  std::atomic<LogSink*> sink{nullptr};
  std::mutex direct_mu;  // one line at a time when writing at once
};

State& state() {
  static State s;
  return s;
}

void write_direct(std::string_view line) {
  std::lock_guard lock(state().direct_mu);
  std::string_view bytes = line;
  while (!bytes.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    bytes.remove_prefix(size_t(n));
  }
}

// The buffers of a thread's records: one per record in progress (a record made while
// another is being built, by a function called for one of its values, gets its own).
struct Buffers {
  std::vector<std::unique_ptr<std::string>> free;
};
thread_local Buffers t_buffers;

std::string* take_buffer() {
  if (t_buffers.free.empty()) {
    auto b = std::make_unique<std::string>();
    b->reserve(256);
    return b.release();
  }
  std::string* b = t_buffers.free.back().release();
  t_buffers.free.pop_back();
  b->clear();
  return b;
}

void give_back(std::string* b) {
  if (b->capacity() > (64 << 10)) {  // a huge record does not pin its memory to the thread
    delete b;
    return;
  }
  t_buffers.free.emplace_back(b);
}

// "2026-11-24T10:11:12.123456Z"; the part up to the second is made once a second per thread.
void append_timestamp(std::string& out) {
  thread_local int64_t cached_second = -1;
  thread_local char cached[20];
  const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  const int64_t second = us / 1000000;
  if (second != cached_second) {
    const std::time_t t = second;
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
    cached_second = second;
  }
  out.append(cached, 19);
  char frac[8] = {'.', '0', '0', '0', '0', '0', '0', 'Z'};
  int64_t f = us % 1000000;
  for (int i = 6; i >= 1; --i, f /= 10) frac[i] = static_cast<char>('0' + f % 10);
  out.append(frac, 8);
}

bool plain_json(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
}

// `s` as a JSON string; bytes that are not UTF-8 become U+FFFD.
void append_json_string(std::string& out, std::string_view s) {
  if (!plain_json(s)) {
    out += nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  out.push_back('"');
  out.append(s);
  out.push_back('"');
}

// A text value: as it is when it is one plain word, else as a JSON string.
void append_text_value(std::string& out, std::string_view s) {
  const bool bare = !s.empty() && plain_json(s) && s.find_first_of(" =") == std::string_view::npos;
  if (bare) out.append(s);
  else append_json_string(out, s);
}

// Text: the message as it is, on one line (a control byte becomes a space), in UTF-8.
void append_text_message(std::string& out, std::string_view s) {
  const size_t from = out.size();
  if (valid_utf8(s)) out.append(s);
  else out.append(sanitize_utf8(s));
  for (size_t i = from; i < out.size(); ++i) {
    if (static_cast<unsigned char>(out[i]) < 0x20 || out[i] == 0x7f) out[i] = ' ';
  }
}

}  // namespace

std::optional<Level> parse_level(std::string_view name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn") return Level::kWarn;
  if (name == "error") return Level::kError;
  return std::nullopt;
}

std::optional<Format> parse_format(std::string_view name) {
  if (name == "json") return Format::kJson;
  if (name == "text") return Format::kText;
  return std::nullopt;
}

std::string_view level_name(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

void configure(Format format, Level min) {
  state().format = format;
  state().min = min;
}

bool enabled(Level level) { return level >= state().min.load(std::memory_order_relaxed); }

void start_async() {
  State& s = state();
  std::lock_guard lock(s.sink_mu);
  if (s.owned) return;
  s.owned = std::make_unique<LogSink>(STDERR_FILENO);
  s.sink = s.owned.get();
}

void stop_async() {
  State& s = state();
  std::lock_guard lock(s.sink_mu);
  s.sink = nullptr;
  s.owned.reset();  // writes what is buffered
}

Record::Record(Level level, std::string_view event, std::string_view msg) {
  if (!enabled(level)) return;
  format_ = state().format.load(std::memory_order_relaxed);
  line_ = take_buffer();
  std::string& out = *line_;
  if (format_ == Format::kJson) {
    out.append("{\"ts\":\"");
    append_timestamp(out);
    out.append("\",\"level\":\"").append(level_name(level)).append("\",\"event\":");
    append_json_string(out, event);
    if (!msg.empty()) {
      out.append(",\"msg\":");
      append_json_string(out, msg);
    }
  } else {
    append_timestamp(out);
    out.push_back(' ');
    const std::string_view name = level_name(level);
    out.append(name).append(6 - name.size(), ' ');
    if (msg.empty()) out.append(event);
    else append_text_message(out, msg);
  }
}

Record::~Record() {
  if (!line_) return;
  if (format_ == Format::kJson) line_->push_back('}');
  if (LogSink* sink = state().sink.load(std::memory_order_acquire)) {
    sink->write(*line_);
  } else {
    line_->push_back('\n');
    write_direct(*line_);
  }
  give_back(line_);
}

void Record::key(std::string_view k) {
  if (format_ == Format::kJson) {  // keys are the program's own plain words: no escaping
    line_->append(",\"").append(k).append("\":");
  } else {
    line_->push_back(' ');
    line_->append(k).push_back('=');
  }
}

Record& Record::str(std::string_view k, std::string_view value) {
  if (!line_) return *this;
  key(k);
  if (format_ == Format::kJson) append_json_string(*line_, value);
  else append_text_value(*line_, value);
  return *this;
}

Record& Record::num(std::string_view k, int64_t value) {
  if (!line_) return *this;
  key(k);
  char buf[24];
  line_->append(buf, std::to_chars(buf, buf + sizeof buf, value).ptr);
  return *this;
}

Record& Record::num(std::string_view k, uint64_t value) {
  if (!line_) return *this;
  key(k);
  char buf[24];
  line_->append(buf, std::to_chars(buf, buf + sizeof buf, value).ptr);
  return *this;
}

Record& Record::fixed(std::string_view k, double value, int digits) {
  if (!line_) return *this;
  key(k);
  char buf[64];  // to_chars: no locale, no printf per record
  line_->append(buf, std::to_chars(buf, buf + sizeof buf, value, std::chars_format::fixed, digits).ptr);
  return *this;
}

Record& Record::json(std::string_view k, const nlohmann::json& value) {
  if (!line_) return *this;
  key(k);
  if (format_ == Format::kText && value.is_string()) {
    append_text_value(*line_, value.get_ref<const std::string&>());
    return *this;
  }
  line_->append(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return *this;
}

}  // namespace kforge::core::log
