#include "core/process/sandbox.hpp"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <set>
#include <system_error>

namespace kforge::core {
namespace fs = std::filesystem;

namespace {

// What every child may read: the system (toolchains live under /usr) and what the dynamic
// loader and compilers consult in /etc. Nothing else of /etc (no passwd, shadow, ssh keys).
constexpr const char* kEtcFiles[] = {"/etc/ld.so.cache",  "/etc/ld.so.conf", "/etc/ld.so.conf.d",
                                     "/etc/alternatives", "/etc/localtime",  "/etc/hipcc",
                                     "/etc/OpenCL"};
// The top-level directories that Debian's merged /usr turns into symlinks.
constexpr const char* kUsrLinks[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};

void add_gpu_nodes(std::vector<std::string>& a) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev", ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("nvidia") || name == "kfd" || name == "dri") {
      a.insert(a.end(), {"--dev-bind", e.path().string(), e.path().string()});
    }
  }
  a.insert(a.end(), {"--ro-bind", "/sys", "/sys"});
}

constexpr const char* kSetpriv = "/usr/bin/setpriv";

bool service_is_root() { return ::geteuid() == 0; }

// The job's own directory tree changes hands around a run: to the sandbox uid (directories
// only: what the service wrote before stays the service's, read-only to the child), then
// everything back to the service, so that nothing the child made stays writable by the
// next child of the same uid. Shared directories (sticky, like /tmp) and paths the service
// does not own are left alone.
void hand_over(const fs::path& root, uid_t uid, gid_t gid, bool files_too) {
  struct stat st {};
  if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_mode & S_ISVTX)) return;
  if (!files_too && st.st_uid != ::geteuid()) return;
  auto give = [&](const fs::path& p) { (void)::lchown(p.c_str(), uid, gid); };
  give(root);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (files_too || it->is_directory(ec)) give(it->path());
  }
}

}  // namespace

std::optional<uid_t> Sandbox::child_uid() const {
  if (!service_is_root()) return std::nullopt;
  if (mode_ == Mode::kBwrap && ::access(kSetpriv, X_OK) != 0) return std::nullopt;
  return limits_.uid;
}

Sandbox::Sandbox(Mode mode, std::string reason, fs::path bwrap, std::vector<fs::path> readable,
                 SandboxLimits limits)
    : mode_(mode),
      reason_(std::move(reason)),
      bwrap_(std::move(bwrap)),
      readable_(std::move(readable)),
      limits_(limits) {}

Result<Sandbox> Sandbox::make(std::string_view mode, std::vector<fs::path> extra_readable,
                              SandboxLimits limits, Spawner spawn) {
  if (mode != "auto" && mode != "bwrap" && mode != "none") {
    return fail_field("/sandbox",
                      "unknown sandbox mode `" + std::string(mode) + "` (auto, bwrap or none)");
  }
  if (mode == "none") return Sandbox(Mode::kNone, "asked for none", {}, {}, limits);

  const char* path_env = std::getenv("PATH");
  fs::path bwrap = find_program("bwrap", path_env ? path_env : "/usr/bin:/bin");
  std::string why;
  if (bwrap.empty()) {
    why = "bwrap (bubblewrap) is not installed";
  } else {
    // A probe: the same kind of sandbox a compile gets, running `true`.
    Sandbox probe(Mode::kBwrap, "", bwrap, extra_readable, limits);
    ProcessSpec spec;
    spec.argv = {"/usr/bin/true"};
    spec.cwd = fs::temp_directory_path();
    spec.env = {"PATH=/usr/bin:/bin"};
    spec.timeout = std::chrono::seconds(20);
    auto r = spawn(probe.wrap(spec));
    if (r && r->ok()) {
      return Sandbox(Mode::kBwrap, mode == "auto" ? "auto: bwrap works here" : "asked for bwrap",
                     bwrap, std::move(extra_readable), limits);
    }
    why = "bwrap does not work here: " +
          (r ? r->describe() +
                   (r->output.empty() ? "" : ": " + r->output.substr(0, r->output.find('\n')))
             : r.error().message);
  }
  if (mode == "bwrap") return fail(ErrorKind::kUnavailable, "--sandbox bwrap: " + why);
  return Sandbox(Mode::kNone, "auto: " + why, {}, {}, limits);
}

std::vector<std::string> Sandbox::bwrap_args(const ProcessSpec& spec) const {
  std::vector<std::string> a = {bwrap_.string()};
  if (child_uid()) {
    // Root sets the namespaces up without a user namespace (in one, uid 0 maps to host
    // root, which RLIMIT_NPROC exempts) and keeps only what setpriv needs to drop to the
    // sandbox uid; setpriv clears every capability on the way.
    a.insert(a.end(), {"--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                       "--unshare-cgroup-try", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"});
  } else {
    a.push_back("--unshare-all");
  }
  a.insert(a.end(), {"--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"});
  std::error_code ec;
  for (const char* d : kUsrLinks) {
    if (fs::is_symlink(d, ec)) {
      a.insert(a.end(), {"--symlink", fs::read_symlink(d, ec).string(), d});
    } else if (fs::exists(d, ec)) {
      a.insert(a.end(), {"--ro-bind", d, d});
    }
  }
  // Directories bwrap makes on its own for a mount point are 0700 when it runs as root:
  // the parents of every mount are made first, 0755, so a child of another uid can reach
  // what is bound (never the host's directories: these live in the sandbox's own root).
  std::set<std::string> made = {"/", "/tmp", "/usr", "/proc", "/dev"};
  auto parents = [&](const fs::path& p) {
    fs::path at = "/";
    for (auto it = p.begin(); it != p.end(); ++it) {
      if (*it == "/" || std::next(it) == p.end()) continue;
      at /= *it;
      if (at.string().starts_with("/usr/") || !made.insert(at.string()).second) continue;
      a.insert(a.end(), {"--perms", "0755", "--dir", at.string()});
    }
  };
  parents("/etc/x");
  for (const char* f : kEtcFiles) a.insert(a.end(), {"--ro-bind-try", f, f});
  // /tmp is world-writable and sticky, as usual: the child may run as another uid.
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"});
  auto bind = [&](const char* how, const fs::path& p) {
    if (!p.is_absolute()) return;
    parents(p);
    a.insert(a.end(), {how, p.string(), p.string()});
  };
  for (const auto& r : readable_) bind("--ro-bind-try", r);
  for (const auto& r : spec.readable) bind("--ro-bind-try", r);
  if (spec.gpu) add_gpu_nodes(a);
  for (const auto& w : spec.writable) bind("--bind", w);
  if (!spec.cwd.empty()) {
    parents(spec.cwd);
    a.insert(a.end(),
             {"--bind", spec.cwd.string(), spec.cwd.string(), "--chdir", spec.cwd.string()});
  }
  a.push_back("--");
  if (auto uid = child_uid()) {
    a.insert(a.end(), {kSetpriv, "--reuid", std::to_string(*uid), "--regid", std::to_string(limits_.gid),
                       "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"});
  }
  // bwrap exports PWD (and OLDPWD) after --chdir, naming the job directory's host path.
  if (::access("/usr/bin/env", X_OK) == 0) a.insert(a.end(), {"/usr/bin/env", "-u", "PWD", "-u", "OLDPWD", "--"});
  return a;
}

ProcessSpec Sandbox::wrap(ProcessSpec spec) const {
  const auto cpu_seconds =
      rlim_t(std::chrono::ceil<std::chrono::seconds>(spec.timeout).count()) + 5;
  spec.rlimits.push_back({RLIMIT_CPU, cpu_seconds});
  spec.rlimits.push_back({RLIMIT_FSIZE, limits_.file_size});
  spec.rlimits.push_back({RLIMIT_NPROC, limits_.processes});
  if (!spec.gpu && limits_.address_space != RLIM_INFINITY) spec.rlimits.push_back({RLIMIT_AS, limits_.address_space});
  if (mode_ == Mode::kNone && child_uid()) spec.run_as = std::pair{limits_.uid, limits_.gid};
  if (mode_ == Mode::kBwrap) {
    // The private /tmp, not the job directory's host path (which names the cache).
    for (auto& e : spec.env) {
      if (e.starts_with("HOME=")) e = "HOME=/tmp";
      if (e.starts_with("TMPDIR=")) e = "TMPDIR=/tmp";
    }
    auto argv = bwrap_args(spec);
    argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
    spec.argv = std::move(argv);
  }
  return spec;
}

std::string Sandbox::cannot_reach(const fs::path& dir) const {
  const auto uid = child_uid();
  if (mode_ != Mode::kNone || !uid) return "";  // bwrap makes the parents of its mounts 0755
  std::error_code ec;
  const fs::path full = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  fs::path at;
  for (const auto& part : full) {
    at /= part;
    struct stat st {};
    if (::stat(at.c_str(), &st) != 0) break;  // made later, by the service, 0755
    const mode_t x = st.st_uid == *uid ? S_IXUSR : st.st_gid == limits_.gid ? S_IXGRP : S_IXOTH;
    if (!(st.st_mode & x)) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
      return "compilers run as uid " + std::to_string(*uid) + " (--sandbox-uid; no bwrap here), which cannot reach " +
             full.string() + ": " + at.string() + " is mode " + mode + " (chmod o+x " + at.string() +
             ", or choose another --cache-dir)";
    }
  }
  return "";
}

Spawner Sandbox::spawner(Spawner inner) const {
  return [self = *this, inner = std::move(inner)](const ProcessSpec& spec) {
    const auto uid = self.child_uid();
    std::vector<fs::path> own = spec.writable;
    if (!spec.cwd.empty()) own.push_back(spec.cwd);
    if (uid) {
      for (const auto& d : own) hand_over(d, *uid, self.limits_.gid, false);
    }
    auto r = inner(self.wrap(spec));
    if (uid) {
      for (const auto& d : own) hand_over(d, ::geteuid(), ::getegid(), true);
    }
    // bwrap exits 128+N when its child died of signal N: report the signal, as without it.
    if (r && self.mode_ == Mode::kBwrap && r->term_signal == 0 && r->exit_code > 128 &&
        r->exit_code < 128 + 65) {
      r->term_signal = r->exit_code - 128;
      r->exit_code = -1;
    }
    // bwrap reports its own failures as "bwrap: ..." and exits 1 before the program runs.
    if (!r || (self.mode_ == Mode::kBwrap && !r->ok() && r->output.starts_with("bwrap: ")))
      ++*self.failures_;
    return r;
  };
}

}  // namespace kforge::core
