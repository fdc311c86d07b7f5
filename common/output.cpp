#include "common/output.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "common/error.h"
#include "common/fd.h"
#include "common/stop.h"

namespace stallscope::common {
namespace {

// write(2) of all of `text`, retrying after EINTR and short writes; 0 or errno.
int write_all(int fd, std::string_view text) noexcept {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

[[noreturn]] void throw_write_error(const std::string& path, int err) {
  throw Error(ErrorKind::io, fmt::format("cannot write {}: {}", path, std::strerror(err)), err);
}

// `path` is a character device or FIFO: written in place.
void write_in_place(const std::string& path, std::string_view text) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) throw_write_error(path, errno);
  if (const int err = write_all(fd.get(), text)) throw_write_error(path, err);
  if (::close(fd.release()) != 0) throw_write_error(path, errno);
}

// A temporary file beside `path` (mkstemp: O_EXCL, mode 0600), written,
// synced and renamed over `path`.
void write_and_rename(const std::string& path, std::string_view text) {
  std::string tmp = path + ".tmp.XXXXXX";
  Fd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    // The directory cannot be written (or does not exist): bad input.
    throw Error(ErrorKind::usage, fmt::format("cannot write {}: {}", path, std::strerror(err)),
                err);
  }
  int err = write_all(fd.get(), text);
  if (err == 0 && ::fsync(fd.get()) != 0) err = errno;
  if (::close(fd.release()) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw_write_error(path, err);
  }
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {};
  struct stat sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

void refuse_output_that_is_an_input(const std::string& output,
                                    const std::vector<std::string>& inputs) {
  // The output's absolute, lexically normal path (its directory resolved):
  // a name beside an input is caught even before that file exists.
  auto normal = [](const std::string& path) {
    std::error_code ec;
    const auto p = std::filesystem::path(path);
    const auto dir = std::filesystem::weakly_canonical(
        p.has_parent_path() ? p.parent_path() : std::filesystem::path("."), ec);
    return ec ? p.lexically_normal() : (dir / p.filename()).lexically_normal();
  };
  for (const auto& input : inputs) {
    if (same_file(output, input)) {
      throw_usage(fmt::format("cannot write {}: it is the input {} (the output would destroy it)",
                              output, input));
    }
    // An SQLite input's files beside it: its WAL (a killed run's commits),
    // WAL index and rollback journal.
    for (const char* suffix : {"-wal", "-shm", "-journal"}) {
      const std::string beside = input + suffix;
      if (same_file(output, beside) || normal(output) == normal(beside)) {
        throw_usage(fmt::format(
            "cannot write {}: it is the {} file of the input {} (the output would destroy it)",
            output, suffix, input));
      }
    }
  }
}

void write_whole_file(const std::string& path, std::string_view text) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw_usage(fmt::format("cannot write {}: is a directory", path));
    if (S_ISBLK(st.st_mode)) throw_usage(fmt::format("cannot write {}: is a block device", path));
    if (S_ISSOCK(st.st_mode)) throw_usage(fmt::format("cannot write {}: is a socket", path));
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      write_in_place(path, text);
      return;
    }
  }
  write_and_rename(path, text);
}

bool standard_output_closed() noexcept {
  pollfd fds[2] = {{.fd = STDOUT_FILENO, .events = 0, .revents = 0},
                   {.fd = STDERR_FILENO, .events = 0, .revents = 0}};
  if (::poll(fds, 2, 0) <= 0) return false;
  for (const auto& p : fds) {
    if ((p.revents & (POLLERR | POLLHUP)) != 0) return true;
  }
  return false;
}

void write_stderr(std::string_view text) noexcept {
  if (write_all(STDERR_FILENO, text) == EPIPE) request_stop_on_broken_pipe();
}

void hold_closed_standard_output() noexcept {
  if (::fcntl(STDOUT_FILENO, F_GETFD) != -1 || errno != EBADF) return;
  const int fd = ::open("/dev/null", O_RDONLY);  // the lowest free: 1, unless 0 is free too
  if (fd >= 0 && fd != STDOUT_FILENO) {
    ::dup2(fd, STDOUT_FILENO);
    ::close(fd);
  }
}

void write_standard_output(std::string_view text) {
  check_standard_output();
  if (const int err = write_all(STDOUT_FILENO, text)) {
    throw Error(ErrorKind::io, fmt::format("cannot write standard output: {}", std::strerror(err)),
                err);
  }
}

void check_standard_output() {
  // C's stdout first: std::cout (synced with it) flushes it too, and a
  // second flush after a failed one finds nothing to write and no errno.
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  std::cout.flush();
  if (!flush_failed && std::ferror(stdout) == 0 && std::cout.good()) return;
  throw Error(ErrorKind::io,
              fmt::format("cannot write standard output: {}",
                          flush_failed && err != 0 ? std::strerror(err) : "a write to it failed"),
              err);
}

}  // namespace stallscope::common
