// Small file helpers with the durability rules of the store: every file the service
// publishes is written to a temporary name in its destination directory, fsynced, and
// renamed into place, so a reader sees the old content or the new, never a torn write.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace kforge::core {

Result<std::string> read_file(const std::filesystem::path& path);
// Writes and fsyncs `path` itself (no rename): for files inside a staging directory.
Result<void> write_file(const std::filesystem::path& path, std::string_view data);
// Temp file in the same directory + fsync + rename + fsync of the directory.
Result<void> write_file_atomic(const std::filesystem::path& path, std::string_view data);
Result<void> fsync_path(const std::filesystem::path& path);  // a file or a directory
// A unique name for temporaries: pid, thread and a counter.
std::string unique_suffix();

}  // namespace kforge::core
