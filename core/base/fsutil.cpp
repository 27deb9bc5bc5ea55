#include "core/base/fsutil.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <thread>

namespace kforge::core {

namespace fs = std::filesystem;

Result<std::string> read_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(ErrorKind::kNotFound, "cannot open " + path.string());
  // Read straight into a string of the size fstat gives (files of tens of MiB, such as an
  // autotune's saved inputs, read at the disk's speed); past that, through a small buffer,
  // for files that grew or report no size.
  struct stat st {};
  std::string data(::fstat(fd, &st) == 0 && st.st_size > 0 ? size_t(st.st_size) : 0, '\0');
  size_t got = 0;
  char chunk[16384];
  while (true) {
    const bool sized = got < data.size();
    const ssize_t n = sized ? ::read(fd, data.data() + got, data.size() - got) : ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return fail(ErrorKind::kInternal, "read " + path.string() + ": " + std::strerror(err));
    }
    if (n == 0) break;
    if (!sized) data.append(chunk, size_t(n));
    got += size_t(n);
  }
  ::close(fd);
  data.resize(got);
  return data;
}

Result<void> write_file(const fs::path& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fail(ErrorKind::kInternal,
                "cannot create " + path.string() + ": " + std::strerror(errno));
  }
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return fail(ErrorKind::kInternal, "write " + path.string() + ": " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return fail(ErrorKind::kInternal, "fsync " + path.string() + ": " + std::strerror(err));
  }
  ::close(fd);
  return {};
}

Result<void> fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail(ErrorKind::kInternal, "open " + path.string() + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    return fail(ErrorKind::kInternal, "fsync " + path.string() + ": " + std::strerror(err));
  return {};
}

std::string unique_suffix() {
  // Formatted by hand: the service makes one per request that brings no X-Request-Id.
  static std::atomic<unsigned long> counter{0};
  static const unsigned long pid = static_cast<unsigned long>(::getpid());
  const unsigned long parts[] = {pid, std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000,
                                 counter.fetch_add(1)};
  char buf[64];
  char* p = buf;
  for (unsigned long part : parts) {
    if (p != buf) *p++ = '.';
    p = std::to_chars(p, buf + sizeof buf, part).ptr;
  }
  return std::string(buf, p);
}

Result<void> write_file_atomic(const fs::path& path, std::string_view data) {
  fs::path tmp = path;
  tmp += ".tmp." + unique_suffix();
  if (auto r = write_file(tmp, data); !r) return r;
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return fail(ErrorKind::kInternal, "rename into " + path.string() + " failed");
  }
  return fsync_path(path.parent_path());
}

}  // namespace kforge::core
