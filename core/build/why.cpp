#include "core/build/why.hpp"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/base/abi.hpp"
#include "core/base/hash.hpp"
#include "core/base/text_diff.hpp"

namespace kforge::core {
namespace {

constexpr const char* kSource = "source";

// The arguments in `a` that `b` lacks, counted as a multiset (a flag given twice is two).
nlohmann::json only_in(const nlohmann::json& a, const nlohmann::json& b) {
  std::unordered_map<std::string, int> left;
  for (const auto& x : b) left[x.dump()]++;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& x : a) {
    if (left[x.dump()]-- > 0) continue;
    out.push_back(x);
  }
  return out;
}

// How many lines one text has that the other lacks (a cheap distance between sources).
size_t line_distance(std::string_view a, std::string_view b) {
  std::unordered_map<std::string_view, long> count;
  auto add = [&](std::string_view text, long sign) {
    while (!text.empty()) {
      size_t end = text.find('\n');
      if (end == std::string_view::npos) end = text.size();
      count[text.substr(0, end)] += sign;
      text.remove_prefix(std::min(text.size(), end + 1));
    }
  };
  add(a, 1);
  add(b, -1);
  size_t d = 0;
  for (const auto& [line, n] : count) d += size_t(n < 0 ? -n : n);
  return d;
}

// "inputs[10]" after "inputs[9]".
bool natural_less(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

std::string describe_family(const nlohmann::json& inputs) {
  const std::string backend = inputs.value("backend", "");
  if (inputs.contains("template")) {
    return "template " + inputs["template"].get<std::string>() +
           (inputs.value("reference", false) ? " (reference)" : "") + " on " + backend;
  }
  return "a " + backend + " source kernel with this signature";
}

// The entry's source as the key saw it (KERNEL_NAME for its name), verified; nullopt when
// it cannot be read.
std::optional<std::string> entry_source(storage::DiskTier& store, const nlohmann::json& m) {
  auto text = store.read_verified(m.value("key", ""), m.value("source_file", ""));
  if (!text) return std::nullopt;
  const std::string name = m.value("kernel_name", "");
  return name.empty() ? *text : replace_identifier(*text, name, kKernelNamePlaceholder);
}

}  // namespace

nlohmann::json key_inputs(const PreparedRequest& p, const RenderedKernel& k) {
  const Toolchain& tc = *p.toolchain;
  std::string arch;
  for (const auto& a : p.archs) arch += (arch.empty() ? "" : ",") + a;
  const std::string version = tc.version_text.substr(0, tc.version_text.find('\n'));
  const auto target = tc.arch_flags(p.archs);
  const std::set<std::string> by_arch(target.begin(), target.end());
  nlohmann::json flags = nlohmann::json::array();
  for (size_t s = 0; s < k.steps.size(); ++s) {
    if (s > 0) flags.push_back("&&");
    const auto& argv = k.steps[s].argv;
    for (size_t i = 1; i < argv.size(); ++i) {
      if (by_arch.contains(argv[i])) continue;
      std::string arg = argv[i];
      for (const auto& inc : p.includes) {
        if (arg == "-I" + inc.dir.string()) arg = "-I" + inc.spelling;
      }
      flags.push_back(std::move(arg));
    }
  }
  nlohmann::json libraries = nlohmann::json::array();
  for (const auto& inc : p.includes) libraries.push_back(inc.spelling);
  nlohmann::json in = {
      {"backend", backend_name(p.req.backend)},
      {"arch", arch},
      {"compiler", {{"version", version}, {"path", tc.compiler.string()}, {"identity", tc.identity}}},
      {"flags", flags},
      {"libraries", libraries},
      {kSource, sha256_hex(key_source_text(k.source))},
  };
  if (p.req.tmpl) {
    const nlohmann::json t = p.req.tmpl->to_json();
    in["template"] = t["template"];
    in["reference"] = p.req.reference;
    for (const auto& [name, value] : t["params"].items()) in["params." + name] = value;
    for (size_t i = 0; i < t["inputs"].size(); ++i) in["inputs[" + std::to_string(i) + "]"] = t["inputs"][i];
    for (const char* f : {"output", "epilogue", "input_reorder"}) in[f] = t[f];
  }
  return in;
}

std::string kernel_family(const PreparedRequest& p, const RenderedKernel& k) {
  nlohmann::json f = {{"backend", backend_name(p.req.backend)}, {"family", k.family}};
  if (p.req.tmpl) {
    f["template"] = p.req.tmpl->name;
  } else {
    nlohmann::json args = nlohmann::json::array();  // names and types: not the symbol
    for (const auto& a : k.abi.args) args.push_back({a.name, a.ctype});
    f["args"] = args;
  }
  return sha256_hex(f.dump()).substr(0, 32);
}

nlohmann::json input_differences(const nlohmann::json& was, const nlohmann::json& now) {
  std::vector<std::string> order = {"backend", "arch", "compiler", "flags", "libraries", "template", "reference"};
  std::vector<std::string> params, tensors, rest;
  for (const auto* side : {&was, &now}) {
    for (const auto& [name, value] : side->items()) {
      if (std::find(order.begin(), order.end(), name) != order.end() || name == kSource) continue;
      auto& list = name.starts_with("params.") ? params : name.starts_with("inputs[") ? tensors : rest;
      if (std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
    }
  }
  std::sort(params.begin(), params.end());
  std::sort(tensors.begin(), tensors.end(), natural_less);
  std::sort(rest.begin(), rest.end());
  order.insert(order.end(), params.begin(), params.end());
  order.insert(order.end(), tensors.begin(), tensors.end());
  order.insert(order.end(), rest.begin(), rest.end());
  order.push_back(kSource);

  nlohmann::json out = nlohmann::json::array();
  for (const auto& name : order) {
    const nlohmann::json w = was.contains(name) ? was[name] : nlohmann::json(nullptr);
    const nlohmann::json n = now.contains(name) ? now[name] : nlohmann::json(nullptr);
    if (w == n) continue;
    nlohmann::json item = {{"input", name}, {"was", w}, {"now", n}};
    if (name == "compiler" && w.is_object() && n.is_object()) {
      // The version says it best; two builds of one version differ in path or binary.
      for (const char* f : {"version", "path", "identity"}) {
        if (w.value(f, "") == n.value(f, "")) continue;
        item["was"] = w.value(f, "");
        item["now"] = n.value(f, "");
        if (std::string(f) != "version") item["detail"] = std::string("the same version; another ") + f;
        break;
      }
    } else if (name == "flags" && w.is_array() && n.is_array()) {
      nlohmann::json gone = only_in(w, n), added = only_in(n, w);
      if (!gone.empty() || !added.empty()) {  // else only their order changed: show both
        item["was"] = gone;
        item["now"] = added;
      }
    }
    out.push_back(std::move(item));
  }
  // A template's source follows from its other inputs: named only when nothing else differs.
  if (now.contains("template") && out.size() > 1 && out.back()["input"] == kSource) out.erase(out.size() - 1);
  return out;
}

nlohmann::json explain_miss(storage::DiskTier& store, const MissQuery& q, size_t candidates) {
  struct Best {
    nlohmann::json manifest, differences;
    size_t lines = 0;
    std::optional<std::string> source;
  };
  std::optional<Best> best;
  for (const auto& [key, published] : store.family_members(q.family, candidates)) {
    if (key == q.key || published >= q.published_before_ns) continue;
    auto m = store.peek_manifest(key);
    if (!m || !m->contains("inputs") || m->contains("export")) continue;
    Best c{*m, input_differences((*m)["inputs"], q.inputs), 0, std::nullopt};
    if (best && c.differences.size() > best->differences.size()) continue;
    if ((*m)["inputs"].value(kSource, "") != q.inputs.value(kSource, "")) {
      c.source = entry_source(store, *m);
      if (!c.source) continue;  // corrupt or gone since it was listed
      c.lines = line_distance(*c.source, q.source);
    }
    // Members come newest first: a tie keeps the newer.
    if (!best || c.differences.size() < best->differences.size() || c.lines < best->lines) best = std::move(c);
  }
  if (!best) {
    return {{"nearest", nullptr},
            {"miss_reason",
             {{{"input", "kernel"},
               {"detail", "no earlier entry of this kernel (" + describe_family(q.inputs) +
                              ") was in the cache: its first build"}}}}};
  }
  nlohmann::json reason = std::move(best->differences);
  for (auto& item : reason) {
    if (item["input"] != kSource || !best->source) continue;
    const std::string was_key = best->manifest.value("key", "");
    item["diff"] = unified_diff(*best->source, q.source, "a/" + q.source_name + " (" + was_key.substr(0, 12) + ")",
                                "b/" + q.source_name);
  }
  if (reason.empty()) {
    reason.push_back({{"input", "unknown"},
                      {"detail", "every recorded input is the same as entry " + best->manifest.value("key", "") +
                                     "'s: the key's derivation itself changed (another kforge version)"}});
  }
  const auto& m = best->manifest;
  return {{"nearest",
           {{"key", m.value("key", "")},
            {"kernel_name", m.value("kernel_name", "")},
            {"status", m.value("status", "")},
            {"created_at", m.value("created_at", int64_t{0})}}},
          {"miss_reason", reason}};
}

nlohmann::json explain_entry(storage::DiskTier& store, const nlohmann::json& m) {
  nlohmann::json out = {{"key", m.value("key", "")},
                        {"kernel_name", m.value("kernel_name", "")},
                        {"created_at", m.value("created_at", int64_t{0})},
                        {"inputs", m.value("inputs", nlohmann::json(nullptr))}};
  if (!m.contains("inputs") || !m.contains("family")) {
    out["nearest"] = nullptr;
    out["miss_reason"] = {{{"input", "unknown"},
                           {"detail", "this entry was built by a kforge that did not record the inputs of its key"}}};
    return out;
  }
  auto source = entry_source(store, m);
  if (!source) {
    out["nearest"] = nullptr;
    out["miss_reason"] = {{{"input", "unknown"}, {"detail", "the entry's source cannot be read (removed or corrupt)"}}};
    return out;
  }
  MissQuery q;
  // An exported kernel is its base kernel renamed: it missed when its base did.
  q.key = m.contains("export") ? m["export"].value("of", "") : m.value("key", "");
  q.family = m["family"];
  q.inputs = m["inputs"];
  q.source = std::move(*source);
  q.source_name = m.value("source_file", kSource);
  q.published_before_ns = store.published_ns(m.value("key", "")).value_or(0);
  out.update(explain_miss(store, q));
  return out;
}

}  // namespace kforge::core
