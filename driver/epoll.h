// The epoll instance of a driver thread: move-only (moving empties the
// source), closed on destruction by the common::Fd it holds. The worker's
// registrations with it are Worker::watch() / unwatch() (driver/epoll.cpp).
// Internal to driver/.
#pragma once

#include "common/fd.h"

namespace stallscope::driver::detail {

class Epoll {
 public:
  // Throws Error(runtime) "cannot create the driver's epoll instance: …".
  Epoll();
  int fd() const noexcept { return fd_.get(); }

 private:
  common::Fd fd_;
};

}  // namespace stallscope::driver::detail
