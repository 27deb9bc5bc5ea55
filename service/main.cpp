// The `kforge` executable: a table of commands (one file each, service/<command>.cpp), the
// command line parsed by CLI11, and the chosen command run.
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "service/commands.hpp"

using namespace kforge::cli;

namespace {

struct Command {
  const char* name;
  const char* alias;  // another name for it, or nullptr
  const char* summary;
  Declare declare;
};

constexpr Command kCommands[] = {
    {"serve", nullptr, "run the compilation service (kforge serve --help lists its settings)", declare_serve},
    {"compile", "submit", "send a request (FILE.json, or - for stdin) to a server and save the kernel", declare_compile},
    {"explain", nullptr, "would this request hit the cache, and if not, why not", declare_explain},
    {"toolchains", nullptr, "show the compilers this host has (or a server has, with --server)", declare_toolchains},
    {"prefetch", nullptr, "compile on a server whatever of a recorded list of requests it lacks", declare_prefetch},
    {"cache", nullptr, "look after a cache directory: stats, gc, verify, export, import (also while a server uses it)",
     declare_cache},
};

bool is_command(const std::string& word) {
  for (const auto& c : kCommands) {
    if (word == c.name || (c.alias && word == c.alias)) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("kforge: a remote kernel compilation service. `kforge COMMAND --help` shows a command's options.",
               "kforge");
  app.set_version_flag("--version", "kforge " KFORGE_VERSION);
  app.require_subcommand(1);
  app.get_formatter()->column_width(32);
  std::vector<std::pair<CLI::App*, Run>> commands;
  for (const auto& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    if (c.alias) sub->alias(c.alias);
    commands.emplace_back(sub, c.declare(*sub));
  }
  const std::string first = argc > 1 ? argv[1] : "";
  if (first.empty()) {
    std::cerr << app.help();
    return kExitUsage;
  }
  if (first == "help") {
    std::cout << app.help();
    return kExitOk;
  }
  if (!first.starts_with("-") && !is_command(first)) {
    std::cerr << "kforge: unknown command `" << first << "`\n" << app.help();
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();  // the help of the (sub)command asked about
    return kExitOk;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::string where = "kforge";
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      where += " " + sub->get_name();
    }
    std::cerr << where << ": " << e.what() << "\n(" << where << " --help lists what it takes)\n";
    return kExitUsage;
  }
  for (auto& [sub, run] : commands) {
    if (sub->parsed()) return run();
  }
  return kExitUsage;  // unreachable: require_subcommand(1)
}
