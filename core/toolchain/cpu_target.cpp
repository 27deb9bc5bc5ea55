#include "core/toolchain/cpu_target.hpp"

#include <algorithm>
#include <regex>
#include <sstream>

namespace kforge::core {
namespace {

// The cache-size tunings -march=native sets (-mtune, where it differs, is the item tune=).
const std::set<std::string> kParams = {"l1-cache-size", "l1-cache-line-size", "l2-cache-size"};

bool name_chars(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

bool digits(std::string_view s) {
  return !s.empty() && s.size() <= 9 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Splits a driver's `-###` command line into words, dropping the quotes it adds.
std::vector<std::string> command_words(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
      any = true;
    } else if (c == ' ' && !quoted) {
      if (any) out.push_back(cur);
      cur.clear();
      any = false;
    } else {
      cur += c;
      any = true;
    }
  }
  if (any) out.push_back(cur);
  return out;
}

std::vector<std::string> expansion_words(const std::string& expansion) {
  std::istringstream in(expansion);
  for (std::string line; std::getline(in, line);) {
    if (line.find("-march=") != std::string::npos && line.find("cc1") != std::string::npos)
      return command_words(line);
  }
  return {};
}

}  // namespace

Result<CpuTarget> CpuTarget::parse(std::string_view text, const std::set<std::string>& known,
                                   const std::string& field) {
  CpuTarget t;
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t plus = text.find('+', start);
    parts.emplace_back(text.substr(start, plus == std::string_view::npos ? plus : plus - start));
    if (plus == std::string_view::npos) break;
    start = plus + 1;
  }
  t.march = parts.front();
  if (!name_chars(t.march)) return fail_field(field, "`" + t.march + "` is not a -march name");
  std::set<std::string> on, off;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& item = parts[i];
    const std::string where = "item `" + item + "` of cpu target `" + std::string(text) + "`: ";
    if (auto eq = item.find('='); eq != std::string::npos) {
      const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
      const bool ok = key == "tune" ? name_chars(value) : kParams.contains(key) && digits(value);
      if (!ok) {
        return fail_field(field, where + "a setting is tune=<cpu>, l1-cache-size=<n>, "
                                         "l1-cache-line-size=<n> or l2-cache-size=<n>");
      }
    } else {
      const bool negated = item.starts_with("no-");
      const std::string feature = negated ? item.substr(3) : item;
      if (!known.contains(feature)) {
        return fail_field(field, where + "`" + feature + "` is not an ISA feature " +
                                     "this compiler knows (GET /toolchains lists them)");
      }
      if ((negated ? on : off).contains(feature))
        return fail_field(field, where + "switches `" + feature + "` both on and off");
      (negated ? off : on).insert(feature);
    }
    t.items.push_back(item);
  }
  std::sort(t.items.begin(), t.items.end());
  t.items.erase(std::unique(t.items.begin(), t.items.end()), t.items.end());
  return t;
}

std::string CpuTarget::str() const {
  std::string s = march;
  for (const auto& i : items) s += "+" + i;
  return s;
}

std::vector<std::string> CpuTarget::flags() const {
  std::vector<std::string> out{"-march=" + march};
  for (const auto& i : items) {
    if (i.starts_with("tune="))
      out.push_back("-mtune=" + i.substr(5));
    else if (i.find('=') != std::string::npos)
      out.push_back("--param=" + i);
    else
      out.push_back("-m" + i);  // "no-avx512f" gives -mno-avx512f
  }
  return out;
}

std::string cpu_expansion_march(const std::string& expansion) {
  for (const auto& w : expansion_words(expansion)) {
    if (w.starts_with("-march=")) return w.substr(7);
  }
  return "";
}

Result<CpuTarget> cpu_native_target(const std::string& expansion,
                                    const std::set<std::string>& march_features,
                                    std::set<std::string>* known) {
  const auto words = expansion_words(expansion);
  CpuTarget t;
  std::set<std::string> on, off;
  std::string tune;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.starts_with("-march=")) {
      t.march = w.substr(7);
    } else if (w.starts_with("-mtune=")) {
      tune = w.substr(7);
    } else if (w == "--param" && i + 1 < words.size()) {
      const std::string& p = words[++i];
      if (auto eq = p.find('='); eq != std::string::npos && kParams.contains(p.substr(0, eq)))
        t.items.push_back(p);
    } else if (w.starts_with("--param=")) {
      const std::string p = w.substr(8);
      if (auto eq = p.find('='); eq != std::string::npos && kParams.contains(p.substr(0, eq)))
        t.items.push_back(p);
    } else if (w.starts_with("-mno-") && name_chars(w.substr(5))) {
      off.insert(w.substr(5));
    } else if (w.starts_with("-m") && w.find('=') == std::string::npos && name_chars(w.substr(2)) &&
               w != "-m64" && w != "-m32") {
      on.insert(w.substr(2));
    }
  }
  if (t.march.empty() || !name_chars(t.march))
    return fail(ErrorKind::kUnavailable, "the compiler's -march=native expansion names no CPU");
  for (const auto& f : on) {
    if (!march_features.contains(f)) t.items.push_back(f);
  }
  for (const auto& f : off) {
    if (march_features.contains(f)) t.items.push_back("no-" + f);
  }
  if (!tune.empty() && tune != t.march && name_chars(tune)) t.items.push_back("tune=" + tune);
  std::sort(t.items.begin(), t.items.end());
  if (known) {
    known->insert(on.begin(), on.end());
    known->insert(off.begin(), off.end());
  }
  return t;
}

std::set<std::string> cpu_enabled_features(const std::string& help_target,
                                           const std::set<std::string>& known) {
  static const std::regex kEnabled(R"(^\s+-m([a-z0-9_.-]+)\s+\[enabled\])");
  std::set<std::string> out;
  std::istringstream in(help_target);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, kEnabled) && known.contains(m[1].str())) out.insert(m[1].str());
  }
  return out;
}

CpuIsa CpuIsa::from_features(const std::set<std::string>& features) {
  CpuIsa isa;
  isa.features.assign(features.begin(), features.end());
  if (features.contains("avx512f")) {
    isa.vector_floats = 16;
    isa.vector_registers = 32;
  } else if (features.contains("avx")) {
    isa.vector_floats = 8;
  }
  isa.fma = features.contains("fma");
  return isa;
}

bool CpuIsa::has(std::string_view feature) const {
  return std::binary_search(features.begin(), features.end(), feature);
}

std::vector<std::string> CpuIsa::missing_on(const CpuIsa& host) const {
  std::vector<std::string> out;
  std::set_difference(features.begin(), features.end(), host.features.begin(), host.features.end(),
                      std::back_inserter(out));
  return out;
}

nlohmann::json CpuIsa::to_json() const {
  return {{"features", features},
          {"vector_floats", vector_floats},
          {"vector_registers", vector_registers},
          {"fma", fma}};
}

}  // namespace kforge::core
