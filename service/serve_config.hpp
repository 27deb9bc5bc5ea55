// The settings of `kforge serve` and the configuration built from them. Every setting
// (kServeSettings) is a flag --NAME, the variable KFORGE_<NAME> (dashes as underscores) or
// a `NAME = value` line of the --config file (service/config_file.hpp), in that order of
// precedence, then its default. CLI11 reads the flags and the variables; the file is read
// after them and fills in only what neither gave (CLI11 2.1's own config reading would let
// the file win over the environment). make_serve_config() turns the values into what the
// layers take, checking each (an error names the setting); it starts nothing.
#pragma once

#include <chrono>
#include <expected>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "api/auth.hpp"
#include "api/server.hpp"
#include "core/build/build.hpp"
#include "core/toolchain/library.hpp"
#include "core/base/log.hpp"
#include "core/storage/redis.hpp"
#include "core/process/sandbox.hpp"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace kforge::cli {

struct SettingSpec {
  const char* name;
  const char* fallback;  // "" for none
  const char* help;
  bool is_flag = false;  // --NAME alone means true (a variable or a line says true/false, 1/0, yes/no)
};
extern const std::span<const SettingSpec> kServeSettings;

// The settings' values as given on the command line, in the environment and in the file.
class ServeSettings {
 public:
  // Adds --NAME (read from KFORGE_<NAME> too) for every setting to `command`.
  void declare(CLI::App& command);
  // After the command line has parsed: the --config file's lines for the settings that
  // neither a flag nor a variable gave. The error says what is wrong, naming file and line.
  std::expected<void, std::string> read_config_file();
  // The setting's value, or its default.
  std::string get(const std::string& name) const;

 private:
  std::map<std::string, std::string> given_;  // bound to the CLI11 options
  std::map<std::string, CLI::Option*> options_;
  std::map<std::string, std::string> from_file_;
};

// What `kforge serve` is wired from: every setting checked, the files it names read (the
// token file, the TLS pair, the --library trees).
struct ServeConfig {
  api::ServerConfig server;
  core::BuildConfig build;
  core::log::Format log_format = core::log::Format::kJson;
  core::log::Level log_level = core::log::Level::kInfo;
  std::filesystem::path cache_dir;
  std::string token_file;
  api::Auth auth;                        // off without a token file
  bool open_to_all = false;              // no token file and a non-loopback --host (--insecure-public)
  std::string tls;                       // the certificate, described (with --tls-cert)
  std::vector<core::HeaderLibrary> libraries;
  std::string sandbox_mode;
  core::SandboxLimits sandbox_limits;
  std::optional<core::storage::RedisUrl> redis;
  uint64_t redis_max_blob = 0;
  std::filesystem::path runner_dir;  // empty: beside kforge
  std::chrono::seconds bench_timeout{120};
  std::string advertise_url;  // empty: the listening URL
};

// `stderr_is_terminal` decides --log-format auto (text on a terminal, else json).
std::expected<ServeConfig, std::string> make_serve_config(const ServeSettings& s, bool stderr_is_terminal = false);

// A setting's non-negative integer; the error names it: "--NAME must be ...".
std::expected<uint64_t, std::string> parse_count(const std::string& name, const std::string& value);

// $XDG_CACHE_HOME/kforge (when it is an absolute path), else ~/.cache/kforge ($HOME, else the
// user's home in the password database): never the working directory. An error when there
// is no home to put it in.
std::expected<std::string, std::string> default_cache_dir();

// A loopback address: 127.0.0.0/8, ::1, localhost.
bool is_loopback(const std::string& host);

}  // namespace kforge::cli
