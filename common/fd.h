// Move-only owners of a file descriptor (Fd) and of an open directory
// stream (Dir): the one way stallscope holds either. Moving empties the
// source; the destructor closes and never throws (a failing close(2) or
// closedir(3) is ignored: on Linux the descriptor is released either way).
// Neither allocates nor makes a system call beyond the open / close it
// replaces, so the sampler's per-tick readers use them as they would a raw
// int or DIR*.
//
//   common::Fd fd(::open(path, O_RDONLY | O_CLOEXEC));
//   if (!fd) return errno;                       // open failed; errno is open's
//   ::pread(fd.get(), buf, sizeof buf, 0);
//                                                // ~Fd closes
//   common::Dir dir(::opendir("/proc"));
//   while (const dirent* e = dir ? dir.read() : nullptr) use(e->d_name);
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <utility>

namespace stallscope::common {

// Owns one file descriptor; -1 means none.
class Fd {
 public:
  Fd() noexcept = default;
  // Adopts `fd` (a negative value, e.g. a failed open(2), gives an empty Fd).
  explicit Fd(int fd) noexcept : fd_(fd < 0 ? -1 : fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  // The descriptor, or -1 when empty; still owned by this Fd.
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  // Gives up ownership without closing; this Fd becomes empty.
  int release() noexcept { return std::exchange(fd_, -1); }
  // Closes the descriptor held (if any) and adopts `fd` (-1: none).
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd < 0 ? -1 : fd;
  }

 private:
  int fd_ = -1;
};

// Owns one directory stream from opendir(3); nullptr means none.
class Dir {
 public:
  Dir() noexcept = default;
  // Adopts `dir` (nullptr, e.g. a failed opendir, gives an empty Dir).
  explicit Dir(DIR* dir) noexcept : dir_(dir) {}
  Dir(Dir&& other) noexcept : dir_(other.release()) {}
  Dir& operator=(Dir&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Dir(const Dir&) = delete;
  Dir& operator=(const Dir&) = delete;
  ~Dir() { reset(); }

  DIR* get() const noexcept { return dir_; }
  explicit operator bool() const noexcept { return dir_ != nullptr; }
  // The next entry (readdir(3): valid until the next read; "." and ".."
  // included), or nullptr at the end or on an error. Requires a non-empty Dir.
  const dirent* read() noexcept { return ::readdir(dir_); }
  // Gives up ownership without closing; this Dir becomes empty.
  DIR* release() noexcept { return std::exchange(dir_, nullptr); }
  // Closes the stream held (if any) and adopts `dir`.
  void reset(DIR* dir = nullptr) noexcept {
    if (dir_) ::closedir(dir_);
    dir_ = dir;
  }

 private:
  DIR* dir_ = nullptr;
};

}  // namespace stallscope::common
