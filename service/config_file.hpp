// The settings file of `kforge serve --config FILE`: one setting per line, as a grammar:
//
//   file    = *( line "\n" ) [ line ]
//   line    = ws [ setting ] ws [ "#" *any-but-newline ]     ; blank lines and comments
//   setting = name ws "=" ws value
//   name    = a setting's name as its flag spells it without "--" (e.g. compile-jobs)
//   value   = *( any byte but "#", "\n" and control characters other than tab )
//   ws      = *( " " / "\t" ), and a "\r" before the newline
//
// The value is taken trimmed of spaces and tabs (it may be empty); a name given twice takes
// its last value. A line that is not a blank, a comment or a `name = value` with a known
// name is an error naming the line; nothing of such a file is used. Pure: reads no file.
#pragma once

#include <expected>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kforge::cli {

struct ConfigLine {
  int line = 0;  // 1-based
  std::string name, value;
};

struct ConfigError {
  int line = 0;         // the line at fault, 1-based
  std::string message;  // what is wrong with it, without the file name or line number
};

// `known(name)`: whether the file may set `name`.
std::expected<std::vector<ConfigLine>, ConfigError> parse_config(
    std::string_view text, const std::function<bool(std::string_view)>& known);

}  // namespace kforge::cli
