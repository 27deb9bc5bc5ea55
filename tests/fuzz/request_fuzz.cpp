// libFuzzer target: the request parser and validator (JSON body, TensorMeta, template
// request, epilogue, options, benchmark) and the kernel-signature parser, on arbitrary
// bytes. Any crash, sanitizer report or uncaught exception is a bug: bad input must come
// back as an Error naming the field, whose message is valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/base/abi.hpp"
#include "core/request/request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kforge::core;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const RequestLimits limits;
  // Every error must be answerable: its message and fields dump as strict JSON (no raw
  // bytes that are not UTF-8 quoted back: that was a 500).
  auto answerable = [](const Error& e) {
    nlohmann::json j = {{"detail", e.message}, {"errors", nlohmann::json::array()}};
    for (const auto& f : e.fields) j["errors"].push_back({{"field", f.field}, {"message", f.message}});
    (void)j.dump();
  };
  if (auto body = parse_json_body(text, 32)) {
    if (auto req = parse_kernel_request(*body, limits)) {
      (void)req->canonical(req->archs).dump();
      if (!req->source.empty()) (void)parse_signature(req->source, req->backend);
      if (req->tmpl) {
        for (const auto& t : req->tmpl->inputs) (void)t.storage_elements();
      }
    } else {
      answerable(req.error());
    }
  } else {
    answerable(body.error());
  }
  // The same bytes as a kernel source, for each backend's stream type.
  for (Backend b : kAllBackends) (void)parse_signature(text, b);
  return 0;
}
