// Small file helpers with the durability rules of the store: every file the service
// publishes is written to a temporary name in its destination directory, fsynced, and
// renamed into place, so a reader sees the old content or the new, never a torn write.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "core/base/error.hpp"

namespace kforge::core {

Result<std::string> read_file(const std::filesystem::path& path);
// Writes and fsyncs `path` itself (no rename): for files inside a staging directory.
Result<void> write_file(const std::filesystem::path& path, std::string_view data);
// Temp file in the same directory + fsync + rename + fsync of the directory.
Result<void> write_file_atomic(const std::filesystem::path& path, std::string_view data);
Result<void> fsync_path(const std::filesystem::path& path);  // a file or a directory
// A unique name for temporaries: pid, thread and a counter.
std::string unique_suffix();

// Removes a directory tree when it goes out of scope (a staging directory that was not
// published, i.e. renamed away).
struct RemoveOnExit {
  std::filesystem::path dir;
  explicit RemoveOnExit(std::filesystem::path d) : dir(std::move(d)) {}
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;
  ~RemoveOnExit() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

}  // namespace kforge::core
