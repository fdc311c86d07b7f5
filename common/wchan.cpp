#include "common/wchan.h"

#include <initializer_list>

namespace stallscope::common {
namespace {

bool has_any(std::string_view w, std::initializer_list<std::string_view> parts) {
  for (const auto part : parts) {
    if (w.find(part) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

WchanFamily wchan_family(std::string_view w) {
  if (w.empty() || w == "0" || w == "-") return WchanFamily::none;
  // Memory before storage: swap reads and reclaim also wait on pages.
  if (has_any(w, {"mem_cgroup", "shrink_", "reclaim", "try_to_free", "__alloc_pages",
                  "alloc_pages_slowpath", "swap", "compact", "kswapd", "oom", "memcg",
                  "throttle_direct"})) {
    return WchanFamily::memory;
  }
  if (has_any(w, {"folio_wait",
                  "wait_on_page",
                  "page_bit",
                  "submit_bio",
                  "jbd2",
                  "blk_",
                  "bio_",
                  "io_schedule",
                  "bit_wait_io",
                  "balance_dirty_pages",
                  "ext4_",
                  "xfs_",
                  "btrfs_",
                  "nfs_",
                  "filemap_fault",
                  "__lock_page",
                  "lock_page",
                  "fsync",
                  "file_write_and_wait",
                  "writeback",
                  "wait_on_buffer",
                  "__wait_on_bit",
                  "do_read_cache",
                  "iomap_",
                  "aio_",
                  "io_uring"})) {
    return WchanFamily::storage;
  }
  // Before the child family: Linux 6.x's futex_do_wait holds "do_wait".
  if (has_any(w, {"futex"})) return WchanFamily::futex;
  if (has_any(w, {"do_wait", "sigsuspend", "sigtimedwait", "sys_pause"})) return WchanFamily::child;
  if (has_any(w, {"epoll", "ep_poll", "poll_schedule", "do_sys_poll", "do_select", "sys_select",
                  "unix_stream_read", "unix_dgram_recv", "sk_wait_data", "tcp_recvmsg",
                  "inet_csk_accept", "skb_wait_for_more", "__skb_wait", "wait_woken"})) {
    return WchanFamily::latch;
  }
  if (has_any(w, {"nanosleep", "hrtimer"})) return WchanFamily::timer;
  if (has_any(w, {"pipe_read", "tty_read", "inotify_read", "signalfd", "eventfd_read", "timerfd",
                  "do_msgrcv", "semtimedop", "io_getevents", "io_cqring_wait", "mq_timedreceive",
                  "fuse_dev_do_read", "kvm_vcpu"})) {
    return WchanFamily::input;
  }
  return WchanFamily::other;
}

bool is_idle_wchan(std::string_view w) {
  switch (wchan_family(w)) {
    case WchanFamily::storage:
    case WchanFamily::memory:
    case WchanFamily::other:
      return false;
    case WchanFamily::none:
    case WchanFamily::latch:
    case WchanFamily::futex:
    case WchanFamily::timer:
    case WchanFamily::child:
    case WchanFamily::input:
      return true;
  }
  return false;
}

std::string_view wchan_meaning(std::string_view w, bool backend) {
  if (has_any(w, {"pipe_write"}) || w == "pipe_wait") {
    // A backend writes to a pipe to log: its stderr (logging_collector
    // off) or the logging collector's pipe; else COPY … TO PROGRAM.
    return backend ? "a full pipe: their log output (stderr, or the logging collector's pipe) is "
                     "not read fast enough"
                   : "a full pipe: its reader does not keep up";
  }
  if (has_any(w, {"sk_stream_wait_memory"}))
    return "a full TCP send buffer: the peer does not read";
  if (has_any(w, {"sock_alloc_send", "sock_wait_for_wmem", "unix_wait_for_peer"})) {
    return backend ? "a full socket send buffer: syslog (/dev/log, journald) or another "
                     "Unix-socket reader falling behind"
                   : "a full socket send buffer: its reader falls behind";
  }
  if (has_any(w, {"tty_write", "n_tty"})) return "a terminal that does not keep up";
  if (has_any(w, {"futex"})) return "a futex: a lock or condition inside the process";
  if (has_any(w, {"do_signal_stop"})) return "stopped by a signal";
  if (has_any(w, {"wait_for_completion"})) return "a kernel completion (a device, a flush)";
  if (has_any(w, {"fuse"})) return "a FUSE file system's daemon";
  if (has_any(w, {"msleep", "schedule_timeout"})) return "a timed sleep in the kernel";
  return {};
}

}  // namespace stallscope::common
