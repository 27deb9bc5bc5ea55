#include "core/request/request.hpp"

#include <algorithm>
#include <regex>
#include <set>

#include "core/base/utf8.hpp"

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

// JSON pointer escaping (RFC 6901): ~ is ~0, / is ~1.
std::string pointer_token(const std::string& key) {
  std::string out;
  for (char ch : key) {
    if (ch == '~') out += "~0";
    else if (ch == '/') out += "~1";
    else out += ch;
  }
  return out;
}

// A SAX pass that keeps the JSON pointer of the value being read, so that a parse error
// (a string that is not UTF-8) can be reported against its field.
struct PointerTracker : nlohmann::json_sax<nlohmann::json> {
  struct Level {
    bool array = false;
    size_t index = 0;  // arrays: the next element's index
    std::string key;   // objects: the last key read
    bool after_key = false;
  };
  std::vector<Level> stack;
  std::string failed_at;

  std::string pointer(bool in_key) const {
    std::string p;
    for (size_t i = 0; i < stack.size(); ++i) {
      const Level& l = stack[i];
      const bool last = i + 1 == stack.size();
      if (l.array) p += "/" + std::to_string(l.index);
      else if (!last || (l.after_key && !in_key)) p += "/" + pointer_token(sanitize_utf8(l.key));
    }
    return p;
  }
  bool value() {
    if (!stack.empty()) {
      if (stack.back().array) ++stack.back().index;
      else stack.back().after_key = false;
    }
    return true;
  }
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  static constexpr size_t kMaxDepth = 256;  // past it, the depth check answers anyway
  bool start_object(std::size_t) override {
    stack.push_back({});
    return stack.size() <= kMaxDepth;
  }
  bool key(string_t& k) override {
    stack.back().key = k;
    stack.back().after_key = true;
    return true;
  }
  bool end_object() override {
    stack.pop_back();
    return value();
  }
  bool start_array(std::size_t) override {
    Level l;
    l.array = true;
    stack.push_back(l);
    return stack.size() <= kMaxDepth;
  }
  bool end_array() override {
    stack.pop_back();
    return value();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    // In an object and not after a key: the bad string is a key; name the object.
    const bool in_key = !stack.empty() && !stack.back().array && !stack.back().after_key;
    failed_at = pointer(in_key);
    return false;
  }
};

std::string field_with_invalid_utf8(std::string_view body) {
  PointerTracker t;
  (void)nlohmann::json::sax_parse(body.begin(), body.end(), &t, nlohmann::json::input_format_t::json, false);
  return t.failed_at;
}

size_t json_depth(const nlohmann::json& j) {
  if (!j.is_structured()) return 0;
  size_t d = 0;
  for (const auto& v : j) d = std::max(d, json_depth(v));
  return d + 1;
}

void parse_epilogue(const nlohmann::json& list, size_t n_inputs, const RequestLimits& limits, Checker& c,
                    std::vector<EpilogueOp>& out) {
  if (!list.is_array()) return c.add("/epilogue", "must be a list of {op, ...}");
  if (list.size() > limits.max_epilogue) {
    return c.add("/epilogue", "at most " + std::to_string(limits.max_epilogue) + " epilogue ops");
  }
  static const std::set<std::string> kOps = {"add", "mul", "scale", "relu", "gelu", "silu", "sigmoid", "tanh", "cast"};
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string f = "/epilogue/" + std::to_string(i);
    const auto& o = list[i];
    if (!o.is_object() || !o.contains("op") || !o["op"].is_string()) {
      c.add(f + "/op", "required: one of add, mul, scale, relu, gelu, silu, sigmoid, tanh, cast");
      continue;
    }
    EpilogueOp op;
    op.op = o["op"].get<std::string>();
    if (!kOps.contains(op.op)) {
      c.add(f + "/op", "unknown op `" + op.op + "` (known: add, mul, scale, relu, gelu, silu, sigmoid, tanh, cast)");
      continue;
    }
    if (op.op == "add" || op.op == "mul") {
      c.unknown_fields(o, f, {"op", "input"});
      if (!o.contains("input") || !o["input"].is_number_integer() || o["input"].get<int64_t>() < 0 ||
          o["input"].get<int64_t>() >= static_cast<int64_t>(n_inputs)) {
        c.add(f + "/input", "required: the index of an entry of `inputs` (0.." + std::to_string(n_inputs ? n_inputs - 1 : 0) + ")");
      } else {
        op.input = o["input"].get<int>();
      }
    } else if (op.op == "scale") {
      c.unknown_fields(o, f, {"op", "value"});
      if (!o.contains("value") || !o["value"].is_number()) c.add(f + "/value", "required: a number");
      else op.value = o["value"].get<double>();
    } else if (op.op == "gelu") {
      c.unknown_fields(o, f, {"op", "approximate"});
      if (o.contains("approximate")) {
        if (o["approximate"] == "tanh") op.tanh_approx = true;
        else if (o["approximate"] != "none") c.add(f + "/approximate", "one of none (erf), tanh");
      }
    } else if (op.op == "cast") {
      c.unknown_fields(o, f, {"op", "dtype"});
      if (!o.contains("dtype") || !o["dtype"].is_string() || !parse_dtype(o["dtype"].get<std::string>())) {
        c.add(f + "/dtype", "required: one of " + all_dtype_names());
      } else {
        op.dtype = *parse_dtype(o["dtype"].get<std::string>());
      }
    } else {
      c.unknown_fields(o, f, {"op"});
    }
    out.push_back(op);
  }
}

void parse_benchmark(const nlohmann::json& b, const RequestLimits& limits, Checker& c, KernelRequest& req) {
  if (b.is_boolean()) {
    if (b.get<bool>()) req.benchmark = nlohmann::json::object();
    return;
  }
  if (!b.is_object()) return c.add("/benchmark", "must be true or an object {verify, vendor, force, budget_ms, inputs, output, extra_args}");
  c.unknown_fields(b, "/benchmark", {"verify", "vendor", "force", "budget_ms", "inputs", "output", "extra_args"});
  for (const char* flag : {"verify", "vendor", "force"}) {
    if (b.contains(flag) && !b[flag].is_boolean()) c.add(std::string("/benchmark/") + flag, "must be true or false");
  }
  if (b.contains("budget_ms") && (!b["budget_ms"].is_number() || b["budget_ms"].get<double>() < 1 || b["budget_ms"].get<double>() > 10000)) {
    c.add("/benchmark/budget_ms", "a number of milliseconds from 1 to 10000");
  }
  if (b.contains("inputs")) {
    if (!b["inputs"].is_array() || b["inputs"].size() > limits.max_inputs) {
      c.add("/benchmark/inputs", "a list of at most " + std::to_string(limits.max_inputs) + " tensors");
    } else {
      for (size_t i = 0; i < b["inputs"].size(); ++i) {
        auto t = parse_tensor(b["inputs"][i], "/benchmark/inputs/" + std::to_string(i), true);
        if (!t) c.errors.insert(c.errors.end(), t.error().fields.begin(), t.error().fields.end());
      }
    }
  }
  if (b.contains("output")) {
    auto t = parse_tensor(b["output"], "/benchmark/output", false);
    if (!t) c.errors.insert(c.errors.end(), t.error().fields.begin(), t.error().fields.end());
  }
  if (b.contains("extra_args")) {
    if (!b["extra_args"].is_array() || b["extra_args"].size() > 64) c.add("/benchmark/extra_args", "a list of at most 64 numbers");
    else {
      for (size_t i = 0; i < b["extra_args"].size(); ++i) {
        if (!b["extra_args"][i].is_number()) c.add("/benchmark/extra_args/" + std::to_string(i), "must be a number");
      }
    }
  }
  req.benchmark = b;
}

void parse_template(const nlohmann::json& body, const RequestLimits& limits, Checker& c, KernelRequest& req) {
  TemplateSpec t;
  if (!body["template"].is_string() || body["template"].get<std::string>().empty()) {
    c.add("/template", "must be a template name (GET /templates lists them)");
  } else {
    t.name = body["template"].get<std::string>();
  }
  if (body.contains("params")) {
    if (!body["params"].is_object()) c.add("/params", "must be an object of tuning parameters");
    else t.params = body["params"];
  }
  if (!body.contains("inputs") || !body["inputs"].is_array() || body["inputs"].empty()) {
    c.add("/inputs", "required: a non-empty list of tensors");
  } else if (body["inputs"].size() > limits.max_inputs) {
    c.add("/inputs", "at most " + std::to_string(limits.max_inputs) + " inputs");
  } else {
    for (size_t i = 0; i < body["inputs"].size(); ++i) {
      auto tm = parse_tensor(body["inputs"][i], "/inputs/" + std::to_string(i), true);
      if (!tm) c.errors.insert(c.errors.end(), tm.error().fields.begin(), tm.error().fields.end());
      else t.inputs.push_back(*tm);
    }
  }
  if (!body.contains("output")) {
    c.add("/output", "required: the output tensor");
  } else if (auto tm = parse_tensor(body["output"], "/output", false); !tm) {
    c.errors.insert(c.errors.end(), tm.error().fields.begin(), tm.error().fields.end());
  } else {
    t.output = *tm;
  }
  std::set<std::string> names;
  for (const auto& in : t.inputs) {
    if (!names.insert(in.name).second) c.add("/inputs", "two tensors are named `" + in.name + "`");
  }
  if (!t.output.name.empty() && names.contains(t.output.name)) c.add("/output/name", "the output's name is taken by an input");
  const size_t n = body.contains("inputs") && body["inputs"].is_array() ? body["inputs"].size() : 0;
  if (body.contains("input_reorder")) {
    const auto& r = body["input_reorder"];
    std::vector<bool> seen(n, false);
    if (!r.is_array() || r.size() != n) {
      c.add("/input_reorder", "must list each index of `inputs` once (" + std::to_string(n) + " entries)");
    } else {
      for (size_t i = 0; i < r.size(); ++i) {
        if (!r[i].is_number_integer() || r[i].get<int64_t>() < 0 || r[i].get<int64_t>() >= static_cast<int64_t>(n) ||
            seen[r[i].get<size_t>()]) {
          c.add("/input_reorder/" + std::to_string(i), "must be an unused index of `inputs`");
        } else {
          seen[r[i].get<size_t>()] = true;
          t.input_reorder.push_back(r[i].get<int>());
        }
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) t.input_reorder.push_back(static_cast<int>(i));
  }
  if (body.contains("epilogue")) parse_epilogue(body["epilogue"], n, limits, c, t.epilogue);
  if (body.contains("reference")) {
    if (!body["reference"].is_boolean()) c.add("/reference", "must be true or false");
    else req.reference = body["reference"].get<bool>();
  }
  req.tmpl = std::move(t);
}

// options.defines: {"NAME": null | integer | "value"}: -DNAME or -DNAME=value. Names are
// macro identifiers and values plain tokens, so no define can smuggle in another flag.
void parse_defines(const nlohmann::json& d, Checker& c, CompileOptions& out) {
  constexpr size_t kMaxDefines = 64;
  if (!d.is_object()) return c.add("/options/defines", "must be an object {\"NAME\": value or null}");
  if (d.size() > kMaxDefines) return c.add("/options/defines", "at most " + std::to_string(kMaxDefines) + " defines");
  static const std::regex kName("[A-Za-z_][A-Za-z0-9_]{0,127}");
  static const std::regex kValue("[A-Za-z0-9_.+-]{0,128}");
  for (auto it = d.begin(); it != d.end(); ++it) {
    const std::string field = "/options/defines/" + pointer_token(it.key());
    if (!std::regex_match(it.key(), kName)) {
      c.add(field, "a macro name is a C identifier of 1 to 128 characters");
      continue;
    }
    const auto& v = it.value();
    if (v.is_null()) {
      out.defines[it.key()] = std::nullopt;
    } else if (v.is_number_integer()) {
      out.defines[it.key()] = v.dump();
    } else if (v.is_boolean()) {
      out.defines[it.key()] = v.get<bool>() ? "1" : "0";
    } else if (v.is_string() && std::regex_match(v.get_ref<const std::string&>(), kValue)) {
      out.defines[it.key()] = v.get<std::string>();
    } else {
      c.add(field, "a value is null, an integer, a boolean or a token of [A-Za-z0-9_.+-] (at most 128)");
    }
  }
}

// options.includes: ["<library>/<dir>", ...], checked against the server's libraries later.
void parse_includes(const nlohmann::json& d, const RequestLimits& limits, Checker& c, CompileOptions& out) {
  if (!d.is_array()) return c.add("/options/includes", "must be a list of \"<library>/<dir>\" strings");
  if (d.size() > limits.max_inputs)
    return c.add("/options/includes", "at most " + std::to_string(limits.max_inputs) + " include directories");
  for (size_t i = 0; i < d.size(); ++i) {
    if (!d[i].is_string() || d[i].get_ref<const std::string&>().empty() || d[i].get_ref<const std::string&>().size() > 256)
      c.add("/options/includes/" + std::to_string(i), "must be a string `<library>/<dir>` of 1 to 256 characters");
    else
      out.includes.push_back(d[i].get<std::string>());
  }
}

}  // namespace

nlohmann::json EpilogueOp::to_json() const {
  nlohmann::json j = {{"op", op}};
  if (op == "add" || op == "mul") j["input"] = input;
  if (op == "scale") j["value"] = value;
  if (op == "gelu") j["approximate"] = tanh_approx ? "tanh" : "none";
  if (op == "cast") j["dtype"] = dtype_name(dtype);
  return j;
}

nlohmann::json TemplateSpec::to_json() const {
  nlohmann::json ins = nlohmann::json::array();
  for (const auto& t : inputs) ins.push_back(t.to_json());
  nlohmann::json ep = nlohmann::json::array();
  for (const auto& e : epilogue) ep.push_back(e.to_json());
  return {{"template", name}, {"params", params}, {"inputs", ins}, {"output", output.to_json()},
          {"input_reorder", input_reorder}, {"epilogue", ep}};
}

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
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    // The parser rejects bytes that are not UTF-8 inside a string; its message quotes
    // them, so it is sanitized, and the field is found by a second, pointer-tracking pass.
    if (!valid_utf8(body)) {
      const std::string field = field_with_invalid_utf8(body);
      return fail_field(field, "a string is not valid UTF-8 (at byte " + std::to_string(invalid_utf8_at(body)) + ")");
    }
    return fail_field("", "invalid JSON: " + sanitize_utf8(e.what()));
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
  const bool template_mode = body.contains("template");
  // A field of the other mode is named as such: a template request whose `template` is
  // misspelt reads as source mode, and its `inputs` are not unknown, only misplaced.
  static const std::set<std::string> kTemplateFields = {"backend", "arch", "template", "params", "inputs", "output",
                                                        "input_reorder", "epilogue", "reference", "options", "benchmark"};
  static const std::set<std::string> kSourceFields = {"backend", "arch", "source", "export_name", "options", "benchmark"};
  static const char* kTemplateList =
      "template mode: backend, arch, template, params, inputs, output, input_reorder, epilogue, reference, options, "
      "benchmark";
  static const char* kSourceList = "source mode: backend, arch, source, export_name, options, benchmark";
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    const auto& mine = template_mode ? kTemplateFields : kSourceFields;
    const auto& other = template_mode ? kSourceFields : kTemplateFields;
    if (mine.contains(k) || (template_mode && k == "source")) continue;  // `source` is refused below
    const std::string field = "/" + pointer_token(k);
    if (other.contains(k)) {
      c.add(field, template_mode ? "`" + k + "` is a source-mode field; a template request (it has `template`) takes " +
                                       std::string(kTemplateList).substr(15)
                                 : "`" + k + "` is a template-mode field, but the request has no `template` (GET " +
                                       "/templates lists them); " + kSourceList);
    } else {
      c.add(field, "unknown field `" + sanitize_utf8(k.substr(0, 64)) + "` (" +
                       (template_mode ? std::string(kTemplateList) + "; " + kSourceList
                                      : std::string(kSourceList) + "; " + kTemplateList) +
                       ")");
    }
  }
  if (template_mode) {
    if (body.contains("source")) c.add("/source", "give either `source` or `template`, not both");
    parse_template(body, limits, c, req);
  }
  if (body.contains("benchmark")) parse_benchmark(body["benchmark"], limits, c, req);

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
      if (s.empty() || s.size() > 1024) c.add("/arch", "an arch is 1 to 1024 characters");
    }
  }

  if (!body.contains("source")) {
    if (!body.contains("template"))
      c.add("/source", "required: the kernel source with KERNEL_NAME (or a `template`)");
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

  if (body.contains("export_name")) {
    const auto& n = body["export_name"];
    static const std::regex kIdent("[A-Za-z_][A-Za-z0-9_]{0,127}");
    if (!n.is_string() || !std::regex_match(n.get_ref<const std::string&>(), kIdent)) {
      c.add("/export_name", "must be a C identifier of 1 to 128 characters");
    } else if (n.get<std::string>() == "KERNEL_NAME") {
      c.add("/export_name", "KERNEL_NAME is the placeholder; leave export_name out");
    } else {
      req.export_name = n.get<std::string>();
      req.options.aot = true;  // the rename works on kernel.o, and Inductor wants it too
    }
  }

  if (body.contains("options")) {
    const auto& o = body["options"];
    if (!o.is_object()) {
      c.add("/options", "must be an object");
    } else {
      c.unknown_fields(o, "/options",
                       {"opt_level", "fast_math", "flush_denormals", "debug_info", "aot", "defines", "includes"});
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
      flag("flush_denormals", req.options.flush_denormals);
      if (req.options.flush_denormals && req.backend == Backend::kCpu)
        c.add("/options/flush_denormals", "a GPU option (hipcc -fgpu-flush-denormals-to-zero, nvcc -ftz=true); g++ has none");
      flag("debug_info", req.options.debug_info);
      flag("aot", req.options.aot);
      if (!req.export_name.empty()) req.options.aot = true;
      if (o.contains("defines")) parse_defines(o["defines"], c, req.options);
      if (o.contains("includes")) parse_includes(o["includes"], limits, c, req.options);
    }
  }
  if (auto r = c.result(); !r) return std::unexpected(r.error());
  return req;
}

nlohmann::json KernelRequest::canonical(const std::vector<std::string>& resolved_archs) const {
  nlohmann::json j = {{"backend", backend_name(backend)}, {"arch", resolved_archs}, {"options", options.to_json()}};
  if (tmpl) {
    j["template"] = tmpl->to_json();
    j["reference"] = reference;
  }
  else j["source"] = source;
  if (!export_name.empty()) j["export_name"] = export_name;
  return j;
}

}  // namespace kforge::core
