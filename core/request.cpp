#include "core/request.hpp"

#include <algorithm>
#include <set>

namespace kforge::core {
namespace {

// Collects field errors so one answer can name every problem at once.
struct Checker {
  std::vector<FieldError> errors;
  void add(std::string field, std::string message) {
    errors.push_back({std::move(field), std::move(message)});
  }
  void unknown_fields(const nlohmann::json& obj, const std::string& base,
                      std::initializer_list<std::string_view> known) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
        std::string list;
        for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        add(base + "/" + it.key(), "unknown field `" + it.key() + "` (known: " + list + ")");
      }
    }
  }
  Result<void> result() const {
    if (errors.empty()) return {};
    Error e = Error::make(ErrorKind::kBadRequest,
                          errors.size() == 1 ? errors.front().message
                                             : std::to_string(errors.size()) + " invalid fields");
    e.fields = errors;
    return std::unexpected(e);
  }
};

size_t json_depth(const nlohmann::json& j) {
  if (!j.is_structured()) return 0;
  size_t d = 0;
  for (const auto& v : j) d = std::max(d, json_depth(v));
  return d + 1;
}

}  // namespace

Result<nlohmann::json> parse_json_body(std::string_view body, size_t max_depth) {
  // Depth is checked while parsing, so a deeply nested body cannot exhaust the stack.
  size_t depth_exceeded = 0;
  auto cb = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (static_cast<size_t>(depth) > max_depth) {
      depth_exceeded = static_cast<size_t>(depth);
      return false;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body.begin(), body.end(), cb);
  } catch (const nlohmann::json::parse_error& e) {
    return fail_field("", std::string("invalid JSON: ") + e.what());
  }
  if (depth_exceeded || json_depth(j) > max_depth) {
    return fail_field("", "JSON nested deeper than " + std::to_string(max_depth) + " levels");
  }
  return j;
}

Result<KernelRequest> parse_kernel_request(const nlohmann::json& body,
                                           const RequestLimits& limits) {
  if (!body.is_object()) return fail_field("", "the request body must be a JSON object");
  Checker c;
  KernelRequest req;
  c.unknown_fields(body, "", {"backend", "arch", "source", "options"});
  if (body.contains("template")) {
    c.errors.back().message =
        "template mode is not supported by this server version; send `source`";
  }

  if (!body.contains("backend")) {
    c.add("/backend", "required: one of cpu, cuda, rocm");
  } else if (!body["backend"].is_string()) {
    c.add("/backend", "must be a string: one of cpu, cuda, rocm");
  } else if (auto b = parse_backend(body["backend"].get<std::string>())) {
    req.backend = *b;
  } else {
    c.add("/backend",
          "unknown backend `" + body["backend"].get<std::string>() + "` (known: cpu, cuda, rocm)");
  }

  if (body.contains("arch")) {
    const auto& a = body["arch"];
    req.archs.clear();
    if (a.is_string()) {
      req.archs.push_back(a.get<std::string>());
    } else if (a.is_array()) {
      if (a.empty()) c.add("/arch", "the arch list is empty");
      if (a.size() > limits.max_archs) {
        c.add("/arch", "at most " + std::to_string(limits.max_archs) + " archs");
      } else {
        for (size_t i = 0; i < a.size(); ++i) {
          if (!a[i].is_string())
            c.add("/arch/" + std::to_string(i), "must be a string");
          else
            req.archs.push_back(a[i].get<std::string>());
        }
      }
    } else {
      c.add("/arch", "must be a string or a list of strings");
    }
    for (const auto& s : req.archs) {
      if (s.empty() || s.size() > 64) c.add("/arch", "an arch name is 1 to 64 characters");
    }
  }

  if (!body.contains("source")) {
    if (!body.contains("template"))
      c.add("/source", "required: the kernel source with KERNEL_NAME");
  } else if (!body["source"].is_string()) {
    c.add("/source", "must be a string");
  } else {
    req.source = body["source"].get<std::string>();
    if (req.source.size() > limits.max_source_bytes) {
      c.add("/source", "source is " + std::to_string(req.source.size()) + " bytes; the limit is " +
                           std::to_string(limits.max_source_bytes));
    } else if (req.source.find('\0') != std::string::npos) {
      c.add("/source", "source contains a NUL byte");
    }
  }

  if (body.contains("options")) {
    const auto& o = body["options"];
    if (!o.is_object()) {
      c.add("/options", "must be an object");
    } else {
      c.unknown_fields(o, "/options", {"opt_level", "fast_math", "debug_info", "aot"});
      if (o.contains("opt_level")) {
        static const std::set<std::string> kLevels = {"O0", "O1", "O2", "O3", "Os"};
        if (!o["opt_level"].is_string() || !kLevels.contains(o["opt_level"].get<std::string>())) {
          c.add("/options/opt_level", "must be one of O0, O1, O2, O3, Os");
        } else {
          req.options.opt_level = o["opt_level"].get<std::string>();
        }
      }
      auto flag = [&](const char* name, bool& dst) {
        if (!o.contains(name)) return;
        if (!o[name].is_boolean())
          c.add(std::string("/options/") + name, "must be true or false");
        else
          dst = o[name].get<bool>();
      };
      flag("fast_math", req.options.fast_math);
      flag("debug_info", req.options.debug_info);
      flag("aot", req.options.aot);
    }
  }
  if (auto r = c.result(); !r) return std::unexpected(r.error());
  return req;
}

nlohmann::json KernelRequest::canonical(const std::vector<std::string>& resolved_archs) const {
  return {{"backend", backend_name(backend)},
          {"arch", resolved_archs},
          {"source", source},
          {"options", options.to_json()}};
}

}  // namespace kforge::core
