// The `kforge` command line as a user and an operator meet it: every command's --help, an
// unknown flag refused by every command (exit 2, naming it) before it does anything, the
// exit statuses and variables it shares with `python -m kforge`, what `serve` refuses, the
// default cache directory, and the log's formats.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/fsutil.hpp"
#include "core/process/process.hpp"
#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

namespace fs = std::filesystem;

struct Ran {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Ran kforge(const fs::path& cwd, std::vector<std::string> args, std::vector<std::string> env = {},
           std::chrono::seconds timeout = std::chrono::seconds(60)) {
  args.insert(args.begin(), KFORGE_BINARY);
  env.push_back("PATH=/usr/bin:/bin");
  core::ProcessSpec spec;
  spec.argv = args;
  spec.cwd = cwd;
  spec.env = env;
  spec.timeout = timeout;
  auto r = core::run_process(spec);
  if (!r) return {};
  return {r->timed_out || r->term_signal ? -1 : r->exit_code, r->output};
}

// Each command as a user types it, with what it needs besides the flag under test.
const std::vector<std::vector<std::string>> kCommands = {
    {"serve"},
    {"compile", "req.json", "--server", "http://127.0.0.1:9"},
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
  for (const char* c : {"serve", "compile, submit", "explain", "toolchains", "prefetch", "cache"})
    EXPECT_NE(top.output.find(std::string("\n  ") + c + " "), std::string::npos) << c << ": " << top.output;
  EXPECT_EQ(kforge(scratch.path(), {}).exit_code, 2);
  const Ran unknown = kforge(scratch.path(), {"compil", "req.json"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown command `compil`"), std::string::npos) << unknown.output;
  const Ran missing = kforge(scratch.path(), {"compile", "--server", "http://127.0.0.1:9"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("FILE is required"), std::string::npos) << missing.output;
}

// The same statuses as `python -m kforge` (clients/python/tests/test_cli.py): 0 ok, 1 an
// answer to read, 2 a usage error, 3 no answer; the server from KFORGE_URL.
TEST(Cli, ExitStatusesVerbsAndTheServersVariable) {
  Scratch scratch;
  ServerProcess server(scratch / "cache", scratch / "server.log");
  ASSERT_TRUE(core::write_file(scratch / "req.json", hit_request().dump()));
  nlohmann::json bad = hit_request();
  bad["arch"] = "no-such-cpu";
  ASSERT_TRUE(core::write_file(scratch / "bad.json", bad.dump()));
  ASSERT_TRUE(core::write_file(scratch / "text.json", "not json"));
  const std::string url = "KFORGE_URL=" + server.url();
  const std::string down = "http://127.0.0.1:" + std::to_string(free_port());

  Ran r = kforge(scratch.path(), {"compile", "req.json"}, {url});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cache    miss"), std::string::npos) << r.output;
  r = kforge(scratch.path(), {"submit", "req.json"}, {url});  // the older name
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cache    hit"), std::string::npos) << r.output;
  r = kforge(scratch.path(), {"explain", "req.json"}, {url});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = kforge(scratch.path(), {"toolchains"}, {url});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(nlohmann::json::parse(r.output, nullptr, false).contains("sandbox")) << "not the server's: " << r.output;

  r = kforge(scratch.path(), {"compile", "bad.json"}, {url});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("/arch"), std::string::npos) << r.output;
  for (const char* file : {"text.json", "missing.json"}) {
    r = kforge(scratch.path(), {"compile", file}, {url});
    EXPECT_EQ(r.exit_code, 2) << file << ": " << r.output;
    EXPECT_NE(r.output.find(file), std::string::npos) << r.output;
  }
  r = kforge(scratch.path(), {"compile", "req.json"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("KFORGE_URL"), std::string::npos) << r.output;

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"compile", "req.json"}, {"explain", "req.json"}, {"prefetch", "req.json"},
        {"toolchains"}}) {
    r = kforge(scratch.path(), args, {"KFORGE_URL=" + down});
    EXPECT_EQ(r.exit_code, 3) << args[0] << ": " << r.output;
    EXPECT_NE(r.output.find("cannot reach " + down + ": connection refused"), std::string::npos) << r.output;
  }
  r = kforge(scratch.path(), {"compile", "req.json", "--server", "http://no-such-host.invalid:8080"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("no such host `no-such-host.invalid`"), std::string::npos) << r.output;
}

TEST(Cli, ServeRefusesAPublicAddressWithoutATokenFile) {
  Scratch scratch;
  const auto t0 = std::chrono::steady_clock::now();
  const Ran r = kforge(scratch.path(), {"serve", "--host", "0.0.0.0", "--port", "0", "--cache-dir", "cache"}, {},
                       std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(r.output.find("listening"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << "one line: " << r.output;
  EXPECT_TRUE(r.output.starts_with("kforge serve: --host 0.0.0.0 is not a loopback address")) << r.output;
  EXPECT_NE(r.output.find("--token-file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--insecure-public"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(scratch / "cache"));

  // Asked for, it serves there, and its log says it is open.
  {
    ServerProcess open(scratch / "cache", scratch / "open.log", {"--host", "0.0.0.0", "--insecure-public"});
    EXPECT_TRUE(open.url().starts_with("http://0.0.0.0:")) << open.url();
  }
  const std::string log = core::read_file(scratch / "open.log").value_or("");
  EXPECT_NE(log.find("open to anyone who can reach 0.0.0.0"), std::string::npos) << log;
  // A loopback address needs neither.
  ServerProcess loopback(scratch / "cache", scratch / "loopback.log", {"--host", "127.0.0.2"});
  EXPECT_TRUE(loopback.url().starts_with("http://127.0.0.2:")) << loopback.url();
}

TEST(Cli, TheDefaultCacheIsUnderTheHomeNeverTheWorkingDirectory) {
  Scratch scratch;
  fs::create_directories(scratch / "work");
  fs::create_directories(scratch / "home");
  Ran r = kforge(scratch / "work", {"cache", "stats"}, {"HOME=" + (scratch / "home").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["cache_dir"], (scratch / "home/.cache/kforge").string()) << r.output;
  r = kforge(scratch / "work", {"cache", "stats"},
             {"HOME=" + (scratch / "home").string(), "XDG_CACHE_HOME=" + (scratch / "xdg").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["cache_dir"], (scratch / "xdg/kforge").string()) << r.output;
  EXPECT_TRUE(fs::is_empty(scratch / "work")) << "a cache in the working directory";
}

bool iso_time(const std::string& s) {
  static const std::regex re(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)");
  return std::regex_match(s, re);
}

// Every line the service writes to stderr is a record of the run's one format.
TEST(Cli, ServeLogsOneFormatWithATimeAndALevelOnEveryLine) {
  Scratch scratch;
  {
    ServerProcess s(scratch / "cache", scratch / "json.log");  // stderr is no terminal: json
    ASSERT_EQ(post_json(s, "/kernels", hit_request().dump()).status, 200);
  }
  std::istringstream json_lines(core::read_file(scratch / "json.log").value_or(""));
  std::set<std::string> events;
  for (std::string line; std::getline(json_lines, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "not a JSON record: " << line;
    EXPECT_TRUE(iso_time(j.value("ts", ""))) << line;
    EXPECT_TRUE(std::set<std::string>({"debug", "info", "warn", "error"}).contains(j.value("level", ""))) << line;
    events.insert(j.value("event", ""));
  }
  for (const char* e : {"cache", "toolchain", "sandbox", "listening", "access", "job", "signal"})
    EXPECT_TRUE(events.contains(e)) << e;

  {
    ServerProcess s(scratch / "cache", scratch / "text.log", {"--log-format", "text"});
    ASSERT_EQ(post_json(s, "/kernels", hit_request().dump()).status, 200);
  }
  std::istringstream text_lines(core::read_file(scratch / "text.log").value_or(""));
  int access = 0;
  for (std::string line; std::getline(text_lines, line);) {
    EXPECT_TRUE(iso_time(line.substr(0, 27))) << line;
    const std::string level = line.substr(28, line.find(' ', 28) - 28);
    EXPECT_TRUE(std::set<std::string>({"debug", "info", "warn", "error"}).contains(level)) << line;
    access += line.find(" access request_id=") != std::string::npos && line.find(" path=/kernels ") != std::string::npos;
  }
  EXPECT_EQ(access, 1);

  {
    ServerProcess s(scratch / "cache", scratch / "warn.log", {"--log-level", "warn"});
    ASSERT_EQ(post_json(s, "/kernels", hit_request().dump()).status, 200);
  }
  const std::string warn = core::read_file(scratch / "warn.log").value_or("");
  EXPECT_EQ(warn.find("\"level\":\"info\""), std::string::npos) << warn;
  EXPECT_NE(warn.find("auth off"), std::string::npos) << warn;  // a warning

  const Ran bad = kforge(scratch.path(), {"serve", "--log-format", "yaml"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--log-format is json, text or auto"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace kforge::testing
