// The epoll instance of a driver thread: move-only (moving empties the
// source), closed on destruction by the common::Fd it holds. The worker's
// registrations with it are Worker::watch() / unwatch() (driver/epoll.cpp).
// Internal to driver/.
#pragma once

#include <sys/epoll.h>

#include <cstdint>

#include "common/fd.h"

namespace stallscope::driver::detail {

class Epoll {
 public:
  // Throws Error(runtime) "cannot create the driver's epoll instance: …".
  Epoll();
  int fd() const noexcept { return fd_.get(); }

  // Waits up to `timeout_ns` (≥ 0) for events, at most `max_events` into
  // `events`; returns how many, or -1 with errno set (EINTR: a signal). The
  // timeout has nanosecond resolution (epoll_pwait2, Linux 5.11): a client
  // throttled by -R is woken at its scheduled time, not at the next whole
  // millisecond. On older kernels (ENOSYS) it falls back to epoll_wait with
  // the timeout rounded up to whole milliseconds.
  int wait(epoll_event* events, int max_events, std::int64_t timeout_ns);

 private:
  common::Fd fd_;
  bool have_pwait2_ = true;
};

}  // namespace stallscope::driver::detail
