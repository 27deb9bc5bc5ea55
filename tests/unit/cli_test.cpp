// The command line of `kforge serve` without starting it: the settings file's grammar, and
// which of a flag, a variable, a file line and a default a setting takes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/base/fsutil.hpp"
#include "service/config_file.hpp"
#include "service/serve_config.hpp"
#include "unit/scratch.hpp"

namespace kforge::cli {
namespace {

bool known(std::string_view name) { return name == "max-queue" || name == "host" || name == "library"; }

TEST(ConfigFile, EachLineGivesItsValueTrimmed) {
  auto lines = parse_config(
      "# settings\n\nmax-queue = 7\n  host\t=\t0.0.0.0   # a comment\r\nlibrary = a=/x,b=/y\nhost =\nmax-queue=9", known);
  ASSERT_TRUE(lines) << lines.error().message;
  ASSERT_EQ(lines->size(), 5u);
  EXPECT_EQ((*lines)[0].line, 3);
  EXPECT_EQ((*lines)[0].name, "max-queue");
  EXPECT_EQ((*lines)[0].value, "7");
  EXPECT_EQ((*lines)[1].value, "0.0.0.0");  // tabs and the CR before the newline go
  EXPECT_EQ((*lines)[2].value, "a=/x,b=/y");  // the first `=` splits
  EXPECT_EQ((*lines)[3].value, "");
  EXPECT_EQ((*lines)[4].line, 7);  // no newline at the end
  EXPECT_EQ((*lines)[4].value, "9");
}

TEST(ConfigFile, AnUnknownNameOrAMalformedLineNamesTheLine) {
  struct Case {
    const char* text;
    int line;
    const char* says;
  };
  for (const Case& c : {Case{"max-queue = 1\nmax_queue = 2\n", 2, "`max_queue` is not a setting"},
                        Case{"\n\n# x\nhost 0.0.0.0\n", 4, "expected `name = value`"},
                        Case{"= 3\n", 1, "the name is missing"},
                        Case{"host = a\x01z\n", 1, "control character"},
                        Case{"host = a\rb\n", 1, "control character"},
                        Case{"config = other.conf\n", 1, "`config` is not a setting"}}) {
    auto lines = parse_config(c.text, [](std::string_view n) { return n != "config" && known(n); });
    ASSERT_FALSE(lines) << c.text;
    EXPECT_EQ(lines.error().line, c.line) << c.text;
    EXPECT_NE(lines.error().message.find(c.says), std::string::npos) << lines.error().message;
  }
}

// `kforge serve ARGS...` parsed as main() parses it, the file read, the config made.
class ServeSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"HOME", "XDG_CACHE_HOME"}) {
      if (const char* value = std::getenv(v)) saved_.emplace_back(v, value);
    }
  }
  void TearDown() override {
    for (const char* v : {"KFORGE_MAX_QUEUE", "KFORGE_CONFIG", "KFORGE_LIBRARY", "KFORGE_HOST", "KFORGE_INSECURE_PUBLIC",
                          "HOME", "XDG_CACHE_HOME"})
      ::unsetenv(v);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  std::expected<ServeConfig, std::string> parse(std::vector<std::string> args, bool terminal = false) {
    CLI::App app("test", "kforge");
    CLI::App* serve = app.add_subcommand("serve");
    ServeSettings settings;
    settings.declare(*serve);
    args.insert(args.begin(), {"kforge", "serve"});
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
    if (auto read = settings.read_config_file(); !read) return std::unexpected(read.error());
    libraries_ = settings.get("library");
    return make_serve_config(settings, terminal);
  }
  testing::Scratch scratch_;
  std::string libraries_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(ServeSettingsTest, AFlagBeatsTheVariableWhichBeatsTheFileWhichBeatsTheDefault) {
  const auto file = scratch_ / "kforge.conf";
  ASSERT_TRUE(core::write_file(file, "max-queue = 7\nhost = 127.0.0.3\n"));
  auto c = parse({});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->server.max_queue, 64u);  // the default
  c = parse({"--config", file.string()});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->server.max_queue, 7u);
  EXPECT_EQ(c->server.host, "127.0.0.3");
  ::setenv("KFORGE_MAX_QUEUE", "8", 1);
  c = parse({"--config", file.string()});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->server.max_queue, 8u);
  EXPECT_EQ(c->server.host, "127.0.0.3");  // the file still gives what the environment does not
  c = parse({"--config", file.string(), "--max-queue", "9"});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->server.max_queue, 9u);
  c = parse({"--config", file.string(), "--max-queue", "9", "--max-queue=10"});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->server.max_queue, 10u);  // the last flag
  // The file named by the variable, and an empty variable is no variable.
  ::setenv("KFORGE_CONFIG", file.string().c_str(), 1);
  ::setenv("KFORGE_MAX_QUEUE", "", 1);
  c = parse({});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->server.max_queue, 7u);
}

TEST_F(ServeSettingsTest, LibrariesAreOneListFromRepeatedFlags) {
  for (const char* name : {"a", "b", "c", "d"}) {
    std::filesystem::create_directories(scratch_ / name);
    ASSERT_TRUE(core::write_file(scratch_ / name / "x.h", "#pragma once\n"));
  }
  auto lib = [&](const char* name) { return std::string(name) + "=" + (scratch_ / name).string(); };
  auto c = parse({"--library", lib("a"), "--library=" + lib("b") + "," + lib("c")});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(libraries_, lib("a") + "," + lib("b") + "," + lib("c"));
  ASSERT_EQ(c->libraries.size(), 3u);
  EXPECT_EQ(c->libraries[2].name, "c");
  ::setenv("KFORGE_LIBRARY", lib("d").c_str(), 1);
  ASSERT_TRUE(parse({}));
  EXPECT_EQ(libraries_, lib("d"));
  c = parse({"--library", lib("a") + "," + lib("a")});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error(), "--library a is given twice");
}

TEST_F(ServeSettingsTest, ABadValueOrFileLineIsAnErrorNamingIt) {
  auto c = parse({"--max-queue", "many"});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error(), "--max-queue must be a non-negative integer, got `many`");
  const auto file = scratch_ / "bad.conf";
  ASSERT_TRUE(core::write_file(file, "max-queue = 7\nmax-queeu = 8\n"));
  c = parse({"--config", file.string()});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error(), file.string() + ":2: `max-queeu` is not a setting (kforge serve --help lists them)");
  c = parse({"--config", (scratch_ / "missing.conf").string()});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().find("cannot read the config file"), std::string::npos) << c.error();
  EXPECT_THROW(parse({"--max-queue"}), CLI::ParseError);  // no value
  EXPECT_THROW(parse({"--max-queu", "3"}), CLI::ParseError);
}

TEST_F(ServeSettingsTest, TheDefaultCacheIsUnderTheHomeNeverTheWorkingDirectory) {
  ::setenv("HOME", "/home/someone/", 1);
  ::unsetenv("XDG_CACHE_HOME");
  auto c = parse({});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->cache_dir, "/home/someone/.cache/kforge");
  ::setenv("XDG_CACHE_HOME", "relative/cache", 1);  // not absolute: ignored, as the XDG spec says
  EXPECT_EQ(parse({})->cache_dir, "/home/someone/.cache/kforge");
  ::setenv("XDG_CACHE_HOME", "/var/cache/me", 1);
  EXPECT_EQ(parse({})->cache_dir, "/var/cache/me/kforge");
  EXPECT_EQ(parse({"--cache-dir", "here"})->cache_dir, "here");
}

TEST_F(ServeSettingsTest, APublicAddressNeedsATokenFileOrSayingSo) {
  auto c = parse({"--host", "0.0.0.0"});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().find("--host 0.0.0.0 is not a loopback address"), std::string::npos) << c.error();
  c = parse({"--host", "0.0.0.0", "--insecure-public"});
  ASSERT_TRUE(c) << c.error();
  EXPECT_TRUE(c->open_to_all);
  EXPECT_EQ(c->server.host, "0.0.0.0");
  ::setenv("KFORGE_INSECURE_PUBLIC", "false", 1);
  EXPECT_FALSE(parse({"--host", "::"}));
  ::setenv("KFORGE_INSECURE_PUBLIC", "1", 1);
  EXPECT_TRUE(parse({"--host", "::"}));
  ::setenv("KFORGE_INSECURE_PUBLIC", "maybe", 1);
  EXPECT_FALSE(parse({"--host", "127.0.0.1"}));
  ::unsetenv("KFORGE_INSECURE_PUBLIC");
  for (const char* loopback : {"127.0.0.1", "127.0.0.2", "localhost", "::1"}) {
    c = parse({"--host", loopback});
    ASSERT_TRUE(c) << loopback << ": " << c.error();
    EXPECT_FALSE(c->open_to_all);
  }
  const auto tokens = scratch_ / "tokens";
  ASSERT_TRUE(core::write_file(tokens, "submit:a-token-of-twenty-bytes\n"));
  c = parse({"--host", "0.0.0.0", "--token-file", tokens.string()});
  ASSERT_TRUE(c) << c.error();
  EXPECT_TRUE(c->auth.enabled());
  EXPECT_FALSE(c->open_to_all);
}

TEST_F(ServeSettingsTest, TheLogIsTextOnATerminalAndJsonElsewhereUnlessAsked) {
  EXPECT_EQ(parse({}, false)->log_format, core::log::Format::kJson);
  EXPECT_EQ(parse({}, true)->log_format, core::log::Format::kText);
  EXPECT_EQ(parse({"--log-format", "json"}, true)->log_format, core::log::Format::kJson);
  EXPECT_EQ(parse({"--log-format", "text"}, false)->log_format, core::log::Format::kText);
  EXPECT_EQ(parse({"--log-level", "warn"})->log_level, core::log::Level::kWarn);
  EXPECT_FALSE(parse({"--log-level", "verbose"}));
}

}  // namespace
}  // namespace kforge::cli
