#include "core/base/backend.hpp"

namespace kforge::core {

std::string_view backend_name(Backend b) {
  switch (b) {
    case Backend::kCpu:
      return "cpu";
    case Backend::kCuda:
      return "cuda";
    case Backend::kRocm:
      return "rocm";
  }
  return "?";
}

std::optional<Backend> parse_backend(std::string_view name) {
  for (Backend b : kAllBackends) {
    if (backend_name(b) == name) return b;
  }
  return std::nullopt;
}

std::string_view source_extension(Backend b) {
  switch (b) {
    case Backend::kCpu:
      return "cpp";
    case Backend::kCuda:
      return "cu";
    case Backend::kRocm:
      return "hip";
  }
  return "txt";
}

std::string_view stream_ctype(Backend b) {
  switch (b) {
    case Backend::kCpu:
      return "void*";
    case Backend::kCuda:
      return "cudaStream_t";
    case Backend::kRocm:
      return "hipStream_t";
  }
  return "void*";
}

}  // namespace kforge::core
