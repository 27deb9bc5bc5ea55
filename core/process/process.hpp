// Runs a child program from an argv vector, never through a shell. The child gets its own
// process group, stdin from /dev/null, stdout+stderr into one captured stream, the given
// environment only, and dies with the service (PR_SET_PDEATHSIG). The parent kills the
// whole group when the wall-clock timeout passes or the output exceeds its cap, and
// always kills leftovers of the group once the child has exited. With `result_fd`, the
// child also gets a pipe on fd 3, read into ProcessResult::result.
// run_process() returns an Error only when the child could not be started at all; a
// child that failed, timed out or was capped is a ProcessResult describing that.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/error.hpp"

namespace kforge::core {

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is an absolute path
  std::filesystem::path cwd;
  std::vector<std::string> env;  // "NAME=value"; nothing is inherited
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  size_t output_cap = 4 << 20;                  // bytes of stdout+stderr kept; more kills the child
  std::string stdin_data;                       // written to the child's stdin, then closed
  std::vector<std::pair<int, rlim_t>> rlimits;  // RLIMIT_* applied in the child
  // What a sandbox (core/process/sandbox) must let the child see beyond the system directories:
  // cwd is writable; `writable` and `readable` are further paths; `gpu` binds the device nodes.
  std::vector<std::filesystem::path> writable;
  std::vector<std::filesystem::path> readable;
  bool gpu = false;
  // A result channel the child's own stdout cannot forge by accident: a pipe on fd 3 whose
  // contents come back in ProcessResult::result (capped at output_cap like the output).
  bool result_fd = false;
  // Set by a sandbox when the service runs as root: the child drops to these ids after its
  // rlimits are set, so that RLIMIT_NPROC (which root ignores) holds.
  std::optional<std::pair<uid_t, gid_t>> run_as;
};

struct ProcessResult {
  int exit_code = -1;   // valid when !signaled
  int term_signal = 0;  // the signal that ended it, if any
  bool timed_out = false;
  bool output_capped = false;
  std::string output;  // stdout and stderr interleaved, at most output_cap bytes
  std::string result;  // what the child wrote to fd 3 (ProcessSpec::result_fd)
  double seconds = 0;

  bool ok() const { return !timed_out && !output_capped && term_signal == 0 && exit_code == 0; }
  std::string describe() const;  // "exit code 1", "killed by signal 9 (timeout after 3.0 s)"
};

using Spawner = std::function<Result<ProcessResult>(const ProcessSpec&)>;

Result<ProcessResult> run_process(const ProcessSpec& spec);

// Looks `name` up in the colon-separated `path` list; empty when not found.
std::filesystem::path find_program(std::string_view name, std::string_view path);

}  // namespace kforge::core
