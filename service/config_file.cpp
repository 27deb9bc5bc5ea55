#include "service/config_file.hpp"

namespace kforge::cli {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::expected<std::vector<ConfigLine>, ConfigError> parse_config(
    std::string_view text, const std::function<bool(std::string_view)>& known) {
  std::vector<ConfigLine> out;
  int n = 0;
  while (!text.empty()) {
    ++n;
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (line.ends_with('\r')) line.remove_suffix(1);
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    for (unsigned char c : line) {
      if ((c < 0x20 && c != '\t') || c == 0x7f)
        return std::unexpected(ConfigError{n, "a control character; expected `name = value`"});
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) return std::unexpected(ConfigError{n, "expected `name = value`"});
    const std::string_view name = trim(line.substr(0, eq));
    if (name.empty()) return std::unexpected(ConfigError{n, "expected `name = value`: the name is missing"});
    if (!known(name)) {
      return std::unexpected(
          ConfigError{n, "`" + std::string(name) + "` is not a setting (kforge serve --help lists them)"});
    }
    out.push_back({n, std::string(name), std::string(trim(line.substr(eq + 1)))});
  }
  return out;
}

}  // namespace kforge::cli
