#include <cctype>
#include <cstdlib>
#include <iostream>

#include "service/commands.hpp"

namespace kforge::cli {

std::optional<Args> parse_args(int argc, char** argv, int first) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      a.flags["help"] = "1";
    } else if (s.starts_with("--")) {
      std::string name = s.substr(2);
      std::string value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (name == "json" || name == "insecure") {  // switches: no value
        value = "1";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        std::cerr << "kforge: --" << name << " needs a value\n";
        return std::nullopt;
      }
      // --library may be given more than once: the values are joined as a list.
      if (name == "library" && a.flags.contains(name)) a.flags[name] += "," + value;
      else if (name == "match" && a.flags.contains(name)) a.flags[name] += "\n" + value;  // globs may hold commas
      else a.flags[name] = value;
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

// Flag, then KFORGE_<NAME>, then the config file, then the default.
std::map<std::string, std::string>& config_values() {
  static std::map<std::string, std::string> values;
  return values;
}

std::string setting(const Args& a, const std::string& name, const std::string& fallback) {
  if (auto it = a.flags.find(name); it != a.flags.end()) return it->second;
  std::string env = "KFORGE_";
  for (char c : name)
    env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (const char* v = std::getenv(env.c_str()); v && *v) return v;
  if (auto it = config_values().find(name); it != config_values().end()) return it->second;
  return fallback;
}

}  // namespace kforge::cli
