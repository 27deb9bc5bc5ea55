// The three compile targets and what differs between them at the ABI level: the source
// file extension the compiler expects and the C type of the stream argument.
#pragma once

#include <optional>
#include <string_view>

namespace kforge::core {

enum class Backend { kCpu, kCuda, kRocm };

inline constexpr Backend kAllBackends[] = {Backend::kCpu, Backend::kCuda, Backend::kRocm};

std::string_view backend_name(Backend b);
std::optional<Backend> parse_backend(std::string_view name);
std::string_view source_extension(Backend b);  // "cpp", "cu", "hip"
std::string_view stream_ctype(Backend b);      // "void*", "cudaStream_t", "hipStream_t"

}  // namespace kforge::core
