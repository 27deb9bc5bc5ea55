// The sandbox that compilers and runners run in (DESIGN §9). Running a stranger's code is
// the service's job, so each child gets as little of the host as it needs:
//   bwrap: new user, pid, ipc, uts, cgroup and network namespaces (no network at all);
//          /usr (system and toolchains) and the few files of /etc the loader needs,
//          read-only; a private /tmp; /proc and a minimal /dev; the job's own directory
//          (ProcessSpec::cwd and ::writable) writable, ::readable read-only; the GPU
//          device nodes and /sys only when ::gpu is set (benchmark runners).
//   none:  the plain process.
// Both add rlimits (CPU seconds, address space, file size, processes) on top of the
// wall-clock timeout, process-group kill and output cap that run_process() applies.
// When the service runs as root, the child itself runs as SandboxLimits::uid (bwrap sets
// the namespaces up as root, then setpriv drops to the uid; without bwrap, run_process
// does), since root is exempt from RLIMIT_NPROC; the spawner hands the job's directories
// (cwd, writable) to that uid for the run and takes them back afterwards. In bwrap,
// HOME and TMPDIR point at the private /tmp, so no host path shows in the environment.
// `auto` uses bwrap when a probe run of it works here, and says why not otherwise.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/error.hpp"
#include "core/process/process.hpp"

namespace kforge::core {

struct SandboxLimits {
#if defined(__SANITIZE_ADDRESS__)
  rlim_t address_space = RLIM_INFINITY;  // a sanitizer build's runner reserves terabytes of shadow
#else
  rlim_t address_space = rlim_t(16)
                         << 30;        // bytes; not applied to GPU runners (drivers map far more)
#endif
  rlim_t file_size = rlim_t(1) << 30;  // bytes, per file written
  // Per uid, a fork-bomb brake. Threads count too: enough for a runner's OpenMP threads
  // and a compile per core on a large host, small enough that a bomb stops within seconds.
  rlim_t processes = 1024;
  // Root ignores RLIMIT_NPROC, so a service running as root runs its children as this
  // unprivileged uid/gid instead (nobody/nogroup by default). RLIMIT_NPROC counts every
  // process of the uid on the host: it should own nothing else (docs/SECURITY.md).
  uid_t uid = 65534;
  gid_t gid = 65534;
};

class Sandbox {
 public:
  enum class Mode { kNone, kBwrap };

  // `mode` is "auto", "bwrap" or "none"; `extra_readable` are toolchain roots outside /usr.
  // kBadRequest for an unknown mode; kUnavailable when "bwrap" is asked and does not work.
  static Result<Sandbox> make(std::string_view mode,
                              std::vector<std::filesystem::path> extra_readable,
                              SandboxLimits limits = {}, Spawner spawn = run_process);

  Mode mode() const { return mode_; }
  // The uid children run as when it is not the service's own (the service is root).
  std::optional<uid_t> child_uid() const;
  std::string_view mode_name() const { return mode_ == Mode::kBwrap ? "bwrap" : "none"; }
  const std::string& reason() const {
    return reason_;
  }  // why this mode (for /toolchains and the log)

  // The spec as it will run: argv behind bwrap's, rlimits added.
  ProcessSpec wrap(ProcessSpec spec) const;
  // A Spawner that wraps every spec before `inner` runs it, and counts the children that
  // could not be started (bwrap refusing a mount, a missing program).
  Spawner spawner(Spawner inner = run_process) const;
  uint64_t failures() const { return failures_->load(); }
  // Without bwrap but as root, children run as the sandbox uid in the host's file system:
  // every directory from / down to `dir` must let that uid through. Why it cannot (the
  // first directory that stops it), or "" when it can or the question does not arise.
  std::string cannot_reach(const std::filesystem::path& dir) const;

 private:
  Sandbox(Mode mode, std::string reason, std::filesystem::path bwrap,
          std::vector<std::filesystem::path> readable, SandboxLimits limits);
  std::vector<std::string> bwrap_args(const ProcessSpec& spec) const;

  Mode mode_;
  std::string reason_;
  std::filesystem::path bwrap_;
  std::vector<std::filesystem::path> readable_;
  SandboxLimits limits_;
  std::shared_ptr<std::atomic<uint64_t>> failures_ = std::make_shared<std::atomic<uint64_t>>(0);
};

}  // namespace kforge::core
