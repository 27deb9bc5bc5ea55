// libFuzzer target: the `kforge serve --config FILE` parser (service/config_file.hpp) on
// arbitrary bytes. The first byte picks the mode.
//   0: the bytes are the file. A file that parses gives only known names, each line number
//      within the file, each value trimmed and free of `#` and newlines; written back as
//      `name = value` lines it parses to the same. A file that does not parse names a line
//      within it, and that line (the first not blank, a comment or a setting) is at fault.
//   1: the bytes describe settings (a name, then a value to its separator): the file they
//      make, with random spacing and comments, gives each setting exactly the value written.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "service/config_file.hpp"

namespace {

constexpr const char* kNames[] = {"host", "port", "max-queue", "library", "token-file", "cache-dir"};

bool known(std::string_view name) {
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

int lines_in(std::string_view text) {
  int n = 0;
  for (size_t at = 0; at < text.size(); ++n) {
    const size_t end = text.find('\n', at);
    at = end == std::string_view::npos ? text.size() : end + 1;
  }
  return n;
}

std::string_view line_at(std::string_view text, int line) {
  for (int n = 1; n < line; ++n) text.remove_prefix(text.find('\n') + 1);
  return text.substr(0, text.find('\n'));
}

void check_raw(std::string_view text) {
  using kforge::cli::parse_config;
  auto lines = parse_config(text, known);
  const int total = lines_in(text);
  if (!lines) {
    const int at = lines.error().line;
    if (at < 1 || at > total || lines.error().message.empty()) std::abort();
    // Every line before it parses on its own; the line itself does not.
    for (int n = 1; n < at; ++n) {
      if (!parse_config(line_at(text, n), known)) std::abort();
    }
    if (parse_config(line_at(text, at), known)) std::abort();
    return;
  }
  std::string again;
  int last = 0;
  for (const auto& l : *lines) {
    if (!known(l.name) || l.line <= last || l.line > total) std::abort();
    last = l.line;
    const std::string& v = l.value;
    if (v.find_first_of("#\n") != std::string::npos) std::abort();
    if (!v.empty() && (v.front() == ' ' || v.front() == '\t' || v.back() == ' ' || v.back() == '\t')) std::abort();
    again += l.name + " = " + v + "\n";
  }
  auto reparsed = parse_config(again, known);
  if (!reparsed || reparsed->size() != lines->size()) std::abort();
  for (size_t i = 0; i < lines->size(); ++i) {
    if ((*reparsed)[i].name != (*lines)[i].name || (*reparsed)[i].value != (*lines)[i].value) std::abort();
  }
}

void check_written(std::string_view spec) {
  struct Setting {
    std::string name, value;
  };
  std::vector<Setting> want;
  std::string file;
  size_t i = 0;
  auto next = [&]() -> unsigned { return i < spec.size() ? static_cast<unsigned char>(spec[i++]) : 0; };
  while (i < spec.size()) {
    const unsigned pick = next();
    Setting s{kNames[pick % std::size(kNames)], ""};
    // The value: printable bytes (and tabs, and bytes past 0x7f) up to a 0 byte, without `#`.
    for (unsigned c; (c = next()) != 0;) {
      if ((c < 0x20 && c != '\t') || c == 0x7f || c == '#') continue;
      s.value.push_back(static_cast<char>(c));
    }
    while (!s.value.empty() && (s.value.back() == ' ' || s.value.back() == '\t')) s.value.pop_back();
    while (!s.value.empty() && (s.value.front() == ' ' || s.value.front() == '\t')) s.value.erase(0, 1);
    const char* pad = (pick & 0x10) ? " \t" : (pick & 0x20) ? "" : " ";
    if (pick & 0x40) file += "# a comment = with an equals sign\n";
    if (pick & 0x80) file += "\n  \t\n";
    file += std::string(pad) + s.name + pad + "=" + pad + s.value + pad + ((pick & 0x08) ? "# why\r\n" : "\n");
    want.push_back(std::move(s));
  }
  auto lines = kforge::cli::parse_config(file, known);
  if (!lines || lines->size() != want.size()) std::abort();
  for (size_t k = 0; k < want.size(); ++k) {
    if ((*lines)[k].name != want[k].name || (*lines)[k].value != want[k].value) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) check_raw(rest);
  else check_written(rest);
  return 0;
}
