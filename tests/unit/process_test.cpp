#include "core/process/process.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "core/process/sandbox.hpp"
#include "unit/scratch.hpp"

namespace kforge::core {
namespace {

ProcessSpec sh(const std::string& script) {
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.cwd = "/";
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.timeout = std::chrono::seconds(20);
  return spec;
}

TEST(Process, CapturesOutputAndExitCode) {
  auto r = run_process(sh("echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->ok());
  EXPECT_NE(r->output.find("out"), std::string::npos);
  EXPECT_NE(r->output.find("err"), std::string::npos);
  EXPECT_EQ(r->describe(), "exit code 3");
}

TEST(Process, EnvironmentIsOnlyWhatIsGiven) {
  ::setenv("KFORGE_SECRET_FOR_TEST", "leak", 1);
  auto r = run_process(sh("env"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->output.find("KFORGE_SECRET_FOR_TEST"), std::string::npos);
  EXPECT_NE(r->output.find("PATH=/usr/bin:/bin"), std::string::npos);
}

TEST(Process, TimeoutKillsTheWholeGroup) {
  testing::Scratch s;
  auto spec = sh("(sleep 30; touch " + (s / "survivor").string() + ") & sleep 30");
  spec.timeout = std::chrono::milliseconds(300);
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_process(spec);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(r->output.find("timed out"), std::string::npos);
  EXPECT_NE(r->describe().find("timed out"), std::string::npos);
}

TEST(Process, OutputFloodIsCapped) {
  auto spec = sh("yes flood");
  spec.output_cap = 4096;
  auto r = run_process(spec);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->output_capped);
  EXPECT_LT(r->output.size(), 4096u + 200u);
}

TEST(Process, SignalDeathIsReported) {
  auto r = run_process(sh("kill -SEGV $$"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->term_signal, SIGSEGV);
  EXPECT_NE(r->describe().find("signal 11"), std::string::npos);
}

TEST(Process, MissingProgramIsExit127WithReason) {
  ProcessSpec spec;
  spec.argv = {"/nonexistent/compiler"};
  spec.cwd = "/";
  auto r = run_process(spec);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 127);
  EXPECT_NE(r->output.find("/nonexistent/compiler"), std::string::npos);
}

TEST(Process, StdinIsDelivered) {
  auto spec = sh("cat");
  spec.stdin_data = "hello runner";
  auto r = run_process(spec);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->output, "hello runner");
}

TEST(Process, FindProgram) {
  EXPECT_EQ(find_program("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_TRUE(find_program("no-such-program-kforge", "/bin:/usr/bin").empty());
}

}  // namespace
}  // namespace kforge::core

namespace kforge::core {
namespace {

// As root without bwrap, children run as the sandbox uid in the host's file system: a
// cache under a 0700 directory is refused at start, naming the directory, instead of
// failing every compile with the compiler's "cannot open".
TEST(Sandbox, ADirectoryTheSandboxUidCannotReachIsNamed) {
  if (::geteuid() != 0) GTEST_SKIP() << "the sandbox uid applies when the service is root";
  testing::Scratch s;
  const auto closed = s.path() / "closed";
  std::filesystem::create_directories(closed / "cache");
  std::filesystem::permissions(s.path(), std::filesystem::perms(0755));
  std::filesystem::permissions(closed, std::filesystem::perms(0700));
  auto sandbox = Sandbox::make("none", {}, SandboxLimits{});
  ASSERT_TRUE(sandbox);
  const std::string why = sandbox->cannot_reach(closed / "cache");
  EXPECT_NE(why.find(closed.string() + " is mode 0700"), std::string::npos) << why;
  std::filesystem::permissions(closed, std::filesystem::perms(0755));
  EXPECT_EQ(sandbox->cannot_reach(closed / "cache"), "");
}

}  // namespace
}  // namespace kforge::core
