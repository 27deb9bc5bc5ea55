#include "core/process/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

namespace kforge::core {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

[[noreturn]] void child_fail(int err_fd, const char* what) {
  // Only async-signal-safe calls between fork and exec.
  int e = errno;
  ssize_t ignored = ::write(err_fd, what, std::strlen(what));
  ignored = ::write(err_fd, ": ", 2);
  const char* msg = ::strerror(e);
  ignored = ::write(err_fd, msg, std::strlen(msg));
  ignored = ::write(err_fd, "\n", 1);
  (void)ignored;
  ::_exit(127);
}

}  // namespace

std::string ProcessResult::describe() const {
  std::ostringstream ss;
  if (timed_out) {
    ss << "timed out after " << seconds << " s and was killed";
  } else if (output_capped) {
    ss << "produced more output than the cap and was killed";
  } else if (term_signal != 0) {
    ss << "killed by signal " << term_signal << " (" << ::strsignal(term_signal) << ")";
  } else {
    ss << "exit code " << exit_code;
  }
  return ss.str();
}

std::filesystem::path find_program(std::string_view name, std::string_view path) {
  if (name.find('/') != std::string_view::npos) {
    return ::access(std::string(name).c_str(), X_OK) == 0 ? std::filesystem::path(name)
                                                          : std::filesystem::path();
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string_view::npos) end = path.size();
    std::filesystem::path dir(std::string(path.substr(start, end - start)));
    if (!dir.empty()) {
      auto cand = dir / name;
      if (::access(cand.c_str(), X_OK) == 0) return cand;
    }
    start = end + 1;
  }
  return {};
}

Result<ProcessResult> run_process(const ProcessSpec& spec) {
  if (spec.argv.empty()) return fail(ErrorKind::kInternal, "run_process: empty argv");
  std::vector<char*> argv = c_strings(spec.argv);
  std::vector<char*> envp = c_strings(spec.env);
  std::string cwd = spec.cwd.string();

  int out_pipe[2];
  int in_pipe[2];
  int res_pipe[2] = {-1, -1};
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return fail(ErrorKind::kInternal, "pipe2 failed");
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return fail(ErrorKind::kInternal, "pipe2 failed");
  }
  if (spec.result_fd && ::pipe2(res_pipe, O_CLOEXEC) != 0) {
    for (int fd : {out_pipe[0], out_pipe[1], in_pipe[0], in_pipe[1]}) ::close(fd);
    return fail(ErrorKind::kInternal, "pipe2 failed");
  }
  const pid_t parent = ::getpid();
  const auto start = Clock::now();
  pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], in_pipe[0], in_pipe[1], res_pipe[0], res_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return fail(ErrorKind::kInternal, std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the service died before prctl took effect
    ::dup2(in_pipe[0], STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(out_pipe[1], STDERR_FILENO);
    if (res_pipe[1] >= 0) {
      // dup2 onto itself keeps O_CLOEXEC: clear it, the program must inherit fd 3.
      if (res_pipe[1] == 3) ::fcntl(3, F_SETFD, 0);
      else ::dup2(res_pipe[1], 3);
    }
    // Reset signal dispositions the service may have changed (SIGPIPE is ignored there).
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (const auto& [res, limit] : spec.rlimits) {
      struct rlimit rl {
        limit, limit
      };
      if (::setrlimit(res, &rl) != 0) child_fail(STDERR_FILENO, "setrlimit");
    }
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) child_fail(STDERR_FILENO, "chdir");
    if (spec.run_as) {
      // After the rlimits: from here on RLIMIT_NPROC counts this uid's processes.
      const auto [uid, gid] = *spec.run_as;
      if (::setgroups(0, nullptr) != 0) child_fail(STDERR_FILENO, "setgroups");
      if (::setresgid(gid, gid, gid) != 0) child_fail(STDERR_FILENO, "setresgid");
      if (::setresuid(uid, uid, uid) != 0) child_fail(STDERR_FILENO, "setresuid");
    }
    ::execve(argv[0], argv.data(), envp.data());
    child_fail(STDERR_FILENO, argv[0]);
  }
  ::setpgid(pid, pid);  // also in the parent, so the group exists before any kill
  ::close(out_pipe[1]);
  ::close(in_pipe[0]);
  if (res_pipe[1] >= 0) ::close(res_pipe[1]);

  // Feed stdin (small payloads: runner requests) and close it.
  {
    size_t done = 0;
    ::signal(SIGPIPE, SIG_IGN);
    while (done < spec.stdin_data.size()) {
      ssize_t n = ::write(in_pipe[1], spec.stdin_data.data() + done, spec.stdin_data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        break;  // the child closed stdin early: its problem, its result will say so
      }
      done += static_cast<size_t>(n);
    }
    ::close(in_pipe[1]);
  }

  ProcessResult res;
  const auto deadline = start + spec.timeout;
  char buf[1 << 14];
  // Both streams are read until EOF (every writer gone), the deadline or the cap.
  struct Stream {
    int fd;
    std::string* into;
  };
  std::vector<Stream> open_streams = {{out_pipe[0], &res.output}};
  if (res_pipe[0] >= 0) open_streams.push_back({res_pipe[0], &res.result});
  // Once the child itself has exited, what its leftovers (a kernel's forked children
  // holding the pipes open) still write is read for a short grace only: then the group
  // is killed below, instead of waiting out the timeout for an EOF that never comes.
  int status = 0;
  bool reaped = false;
  Clock::time_point grace_end = Clock::time_point::max();
  while (!open_streams.empty()) {
    auto now = Clock::now();
    if (now >= deadline) {
      res.timed_out = true;
      break;
    }
    if (!reaped && ::waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      grace_end = now + std::chrono::milliseconds(200);
    }
    if (now >= grace_end) break;
    int wait_ms =
        static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(std::min(deadline, grace_end) - now).count()) +
        1;
    wait_ms = std::min(wait_ms, 100);  // and look at the child again
    std::vector<pollfd> pfds;
    for (const auto& st : open_streams) pfds.push_back({st.fd, POLLIN, 0});
    int pr = ::poll(pfds.data(), pfds.size(), wait_ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pr == 0) continue;
    bool failed = false;
    for (size_t i = pfds.size(); i-- > 0;) {
      if (pfds[i].revents == 0) continue;
      ssize_t n = ::read(pfds[i].fd, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        failed = true;
        break;
      }
      if (n == 0) {  // EOF on this stream
        open_streams.erase(open_streams.begin() + static_cast<long>(i));
        continue;
      }
      std::string& into = *open_streams[i].into;
      size_t room = spec.output_cap - std::min(spec.output_cap, into.size());
      into.append(buf, std::min(room, static_cast<size_t>(n)));
      if (static_cast<size_t>(n) > room) {
        res.output_capped = true;
        failed = true;
        break;
      }
    }
    if (failed) break;
  }
  if (res.timed_out || res.output_capped) ::kill(-pid, SIGKILL);
  while (!reaped && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::kill(-pid, SIGKILL);  // leftovers of the group (daemonized grandchildren)
  ::close(out_pipe[0]);
  if (res_pipe[0] >= 0) ::close(res_pipe[0]);
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) res.term_signal = WTERMSIG(status);
  if (res.output_capped) {
    res.output += "\n[kforge: output exceeded " + std::to_string(spec.output_cap) +
                  " bytes; the process was killed]\n";
  }
  if (res.timed_out) {
    res.output += "\n[kforge: timed out after " +
                  std::to_string(std::chrono::duration<double>(spec.timeout).count()) +
                  " s; the process group was killed]\n";
  }
  return res;
}

}  // namespace kforge::core
