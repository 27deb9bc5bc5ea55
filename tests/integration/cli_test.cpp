// The `kforge` command line as a user meets it: every command's --help, and an unknown
// flag refused by every command (exit 2, naming it) before it does anything.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/fsutil.hpp"
#include "core/process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

namespace fs = std::filesystem;

struct Ran {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Ran kforge(const fs::path& cwd, std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), KFORGE_BINARY);
  env.push_back("PATH=/usr/bin:/bin");
  auto r = core::run_process({.argv = args, .cwd = cwd, .env = env, .timeout = std::chrono::seconds(60)});
  if (!r) return {};
  return {r->timed_out || r->term_signal ? -1 : r->exit_code, r->output};
}

// Each command as a user types it, with what it needs besides the flag under test.
const std::vector<std::vector<std::string>> kCommands = {
    {"serve"},
    {"submit", "req.json", "--server", "http://127.0.0.1:9"},
    {"explain", "req.json", "--server", "http://127.0.0.1:9"},
    {"prefetch", "req.json", "--server", "http://127.0.0.1:9"},
    {"toolchains"},
    {"cache", "stats", "--cache-dir", "cache"},
    {"cache", "gc", "--cache-dir", "cache"},
    {"cache", "verify", "--cache-dir", "cache"},
    {"cache", "export", "--cache-dir", "cache", "-o", "out.tar.zst"},
    {"cache", "import", "in.tar.zst", "--cache-dir", "cache"},
};

std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

TEST(Cli, EveryCommandRefusesAnUnknownFlagNamingIt) {
  Scratch scratch;
  ASSERT_TRUE(core::write_file(scratch / "req.json", R"({"backend": "cpu", "source": "x"})"));
  for (auto args : kCommands) {
    args.push_back("--no-such-flag=1");
    const Ran r = kforge(scratch.path(), args);
    EXPECT_EQ(r.exit_code, 2) << joined(args) << ": " << r.output;
    EXPECT_NE(r.output.find("--no-such-flag"), std::string::npos) << joined(args) << ": " << r.output;
    EXPECT_EQ(r.output.find("listening on"), std::string::npos) << joined(args);
    EXPECT_FALSE(fs::exists(scratch / "cache")) << joined(args) << " ran before refusing the flag";
  }
  // Placed before the file, a flag does not take the file for its value.
  const Ran r = kforge(scratch.path(), {"submit", "--verbose", "req.json", "--server", "http://127.0.0.1:9"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--verbose"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("cannot reach"), std::string::npos) << "it went on with the request: " << r.output;
}

TEST(Cli, EveryCommandHasItsOwnHelp) {
  Scratch scratch;
  for (auto args : kCommands) {
    const std::string name = args[0] == "cache" ? "cache " + args[1] : args[0];
    args.push_back("--help");
    const Ran r = kforge(scratch.path(), args);
    EXPECT_EQ(r.exit_code, 0) << joined(args) << ": " << r.output;
    EXPECT_NE(r.output.find("Usage: kforge " + name + " [OPTIONS]"), std::string::npos) << joined(args) << ": " << r.output;
  }
  const Ran top = kforge(scratch.path(), {"--help"});
  EXPECT_EQ(top.exit_code, 0);
  for (const char* c : {"serve", "submit", "explain", "toolchains", "prefetch", "cache"})
    EXPECT_NE(top.output.find(std::string("\n  ") + c + " "), std::string::npos) << c << ": " << top.output;
  EXPECT_EQ(kforge(scratch.path(), {}).exit_code, 2);
  const Ran unknown = kforge(scratch.path(), {"compil", "req.json"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown command `compil`"), std::string::npos) << unknown.output;
  const Ran missing = kforge(scratch.path(), {"submit", "--server", "http://127.0.0.1:9"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("FILE is required"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace kforge::testing
