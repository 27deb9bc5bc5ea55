// The `kforge` executable's command line: arguments, settings, and the commands that live
// outside main.cpp (the client commands in client.cpp). A command returns the process's
// exit status: 0 success, 1 failure, 2 a usage error; it prints its own messages.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kforge::cli {

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
};

// --name value, --name=value, switches (--json, --insecure) and positionals; nullopt after
// printing why when a flag lacks its value.
std::optional<Args> parse_args(int argc, char** argv, int first);
// The values read from `kforge serve --config FILE`.
std::map<std::string, std::string>& config_values();
// A setting: the flag, then KFORGE_<NAME>, then the config file, then `fallback`.
std::string setting(const Args& a, const std::string& name, const std::string& fallback);

int submit(const Args& a);      // kforge submit FILE --server URL [--out DIR]
int explain(const Args& a);     // kforge explain FILE --server URL [--json]
int prefetch(const Args& a);    // kforge prefetch MANIFEST --server URL
int toolchains(const Args& a);  // kforge toolchains [--server URL]

}  // namespace kforge::cli
