// libFuzzer target: the request parser and validator (JSON body, TensorMeta, template
// request, epilogue, options, benchmark) and the kernel-signature parser, on arbitrary
// bytes. Any crash, sanitizer report or uncaught exception is a bug: bad input must come
// back as an Error naming the field.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/abi.hpp"
#include "core/request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kforge::core;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const RequestLimits limits;
  if (auto body = parse_json_body(text, 32)) {
    if (auto req = parse_kernel_request(*body, limits)) {
      (void)req->canonical(req->archs).dump();
      if (!req->source.empty()) (void)parse_signature(req->source, req->backend);
    }
  }
  // The same bytes as a kernel source, for each backend's stream type.
  for (Backend b : kAllBackends) (void)parse_signature(text, b);
  return 0;
}
