// The service's log (issue 40): one record per line on stderr, in one format per run.
// Every record has an ISO-8601 UTC timestamp with microseconds, a level and an event name,
// then an optional message (a sentence for a person) and fields:
//
//   json: {"ts":"2026-11-24T10:11:12.123456Z","level":"info","event":"access","request_id":"r1",...}
//         {"ts":"...","level":"info","event":"cache","msg":"cache at /var/cache/kforge","root":"/var/cache/kforge"}
//   text: 2026-11-24T10:11:12.123456Z info  access request_id=r1 method=POST path=/kernels ...
//         2026-11-24T10:11:12.123456Z info  cache at /var/cache/kforge root=/var/cache/kforge
//
// In text, the message stands in for the event name, and a value is quoted (as a JSON
// string) only when it holds a space, a quote, `=`, a control byte or nothing. Bytes that
// are not UTF-8 become U+FFFD in either format, so every JSON line parses.
//
// A Record is written when it goes out of scope, at the end of the statement that makes it;
// one below the configured level costs a comparison and writes nothing. Until start_async()
// a record is written at once (one write(2) per line); after it, through a LogSink
// (core/base/log_sink.hpp): the request's thread only appends to its own buffer. stop_async()
// writes what is buffered and goes back to writing at once; so does the end of the process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kforge::core::log {

enum class Level : uint8_t { kDebug, kInfo, kWarn, kError };
enum class Format : uint8_t { kJson, kText };

std::optional<Level> parse_level(std::string_view name);    // debug, info, warn, error
std::optional<Format> parse_format(std::string_view name);  // json, text
std::string_view level_name(Level level);

// The format and the lowest level written, for the whole process (default: json, info).
void configure(Format format, Level min);
bool enabled(Level level);
void start_async();
void stop_async();

// Keys are the program's own words ([a-z_]), written as they are.
class Record {
 public:
  Record(Level level, std::string_view event, std::string_view msg = {});
  ~Record();
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;

  Record& str(std::string_view key, std::string_view value);
  Record& num(std::string_view key, int64_t value);
  Record& num(std::string_view key, uint64_t value);
  Record& num(std::string_view key, int value) { return num(key, int64_t{value}); }
  Record& fixed(std::string_view key, double value, int digits);
  Record& json(std::string_view key, const nlohmann::json& value);

 private:
  void key(std::string_view k);
  std::string* line_ = nullptr;  // a buffer of the thread's; null when the level is off
  Format format_ = Format::kJson;
};

inline Record debug(std::string_view event, std::string_view msg = {}) { return {Level::kDebug, event, msg}; }
inline Record info(std::string_view event, std::string_view msg = {}) { return {Level::kInfo, event, msg}; }
inline Record warn(std::string_view event, std::string_view msg = {}) { return {Level::kWarn, event, msg}; }
inline Record error(std::string_view event, std::string_view msg = {}) { return {Level::kError, event, msg}; }

}  // namespace kforge::core::log
