// The commands of the `kforge` executable, one file each (service/<command>.cpp), listed
// in main.cpp's table. A command declares its flags and positionals on its own CLI11
// subcommand and returns what runs it once the command line has parsed; CLI11 refuses an
// unknown flag, a missing value or a stray argument (exit 2) and makes each `--help`.
// A command returns the process's exit status (kExit*) and prints its own messages.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace kforge::cli {

// The exit statuses, the same for `python -m kforge` (docs/API.md, "The command line").
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;       // an answer to read: a compile error, a refused request, a corrupt cache
constexpr int kExitUsage = 2;        // the command line, a setting or an input file is wrong
constexpr int kExitUnreachable = 3;  // no answer from the server (refused, timed out, no such host, TLS)

using Run = std::function<int()>;
using Declare = Run (*)(CLI::App& command);

Run declare_serve(CLI::App& command);       // service/serve.cpp
Run declare_cache(CLI::App& command);       // service/cache.cpp
Run declare_compile(CLI::App& command);     // service/compile.cpp
Run declare_explain(CLI::App& command);     // service/explain.cpp
Run declare_prefetch(CLI::App& command);    // service/prefetch.cpp
Run declare_toolchains(CLI::App& command);  // service/toolchains.cpp

}  // namespace kforge::cli
