// SHA-256 through OpenSSL's EVP interface, as lowercase hex. Hashing a file reads it in
// chunks; a file that cannot be read is an Error (kInternal), never an empty digest.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "core/base/error.hpp"

namespace kforge::core {

std::string sha256_hex(std::string_view data);
Result<std::string> sha256_file(const std::filesystem::path& path);

// True when `s` is exactly 64 lowercase hex characters (a key as it appears in URLs).
bool is_hex_key(std::string_view s);

}  // namespace kforge::core
