// The epoll instance of a driver thread: move-only, closed on destruction.
// The worker's registrations with it are Worker::watch() / unwatch()
// (driver/epoll.cpp). Internal to driver/.
#pragma once

namespace stallscope::driver::detail {

class Epoll {
 public:
  // Throws Error(runtime) "cannot create the driver's epoll instance: …".
  Epoll();
  Epoll(Epoll&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Epoll& operator=(Epoll&& other) noexcept;
  Epoll(const Epoll&) = delete;
  Epoll& operator=(const Epoll&) = delete;
  ~Epoll();
  int fd() const noexcept { return fd_; }

 private:
  int fd_;
};

}  // namespace stallscope::driver::detail
