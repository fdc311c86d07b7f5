// The driver thread's epoll instance, and Worker's registrations with it
// (driver/worker.h): which client sockets a wait covers, kept from one wait
// to the next.
#include "driver/epoll.h"

#include <libpq-fe.h>
#include <sys/epoll.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/error.h"
#include "common/units.h"
#include "driver/worker.h"

namespace stallscope::driver::detail {

Epoll::Epoll() : fd_(epoll_create1(EPOLL_CLOEXEC)) {
  if (!fd_) {
    throw Error(ErrorKind::runtime,
                fmt::format("cannot create the driver's epoll instance: {}", std::strerror(errno)));
  }
}

int Epoll::wait(epoll_event* events, int max_events, std::int64_t timeout_ns) {
  if (have_pwait2_) {
    const timespec timeout{.tv_sec = timeout_ns / common::kNsPerS,
                           .tv_nsec = timeout_ns % common::kNsPerS};
    const int n = epoll_pwait2(fd_.get(), events, max_events, &timeout, nullptr);
    if (n >= 0 || errno != ENOSYS) return n;
    have_pwait2_ = false;
  }
  const auto timeout_ms = (timeout_ns + common::kNsPerMs - 1) / common::kNsPerMs;
  return epoll_wait(fd_.get(), events, max_events, static_cast<int>(timeout_ms));
}

bool Worker::watch(Client& c, std::size_t index, int fd, std::uint32_t events) {
  if (c.watched_fd >= 0 && c.watched_fd != fd) {
    // libpq closed the socket it had (a lost connection), which took it out
    // of the epoll set; its number may already be another client's socket,
    // so it is not touched.
    c.watched_fd = -1;
    c.watched_events = 0;
  }
  if (fd < 0) return events == 0;
  if (events == c.watched_events && (events == 0 || fd == c.watched_fd)) return true;
  epoll_event e{.events = events, .data = {.u32 = static_cast<std::uint32_t>(index)}};
  if (events == 0) {
    // Nothing to wait for (throttled, sleeping, backoff): out of the set,
    // as epoll reports a hang-up even with no events asked for, and a
    // server closing the connection must not wake every wait.
    epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, fd, nullptr);
    c.watched_fd = -1;
    c.watched_events = 0;
    return true;
  }
  int op = fd == c.watched_fd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
  if (epoll_ctl(epoll_.fd(), op, fd, &e) != 0) {
    // EEXIST: still registered; ENOENT: gone. The other operation applies.
    op = op == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(epoll_.fd(), op, fd, &e) != 0) {
      c.watched_fd = -1;
      c.watched_events = 0;
      return false;
    }
  }
  c.watched_fd = fd;
  c.watched_events = events;
  return true;
}

void Worker::unwatch(Client& c) {
  // Only while the socket is still the connection's own (see watch()).
  if (c.watched_fd >= 0 && c.conn && PQsocket(c.conn.get()) == c.watched_fd) {
    epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, c.watched_fd, nullptr);
  }
  c.watched_fd = -1;
  c.watched_events = 0;
}

void Worker::close_connection(Client& c) {
  unwatch(c);
  c.conn.reset();
}

}  // namespace stallscope::driver::detail
