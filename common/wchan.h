// What a kernel wait channel means: the one table the sampler (is a sleep
// held up in the kernel?) and the correlator (which part of the accounting
// a sleep belongs to, and what to call it) both read.
//
// A wait channel is the kernel function a sleeping task waits in, as
// /proc/PID/wchan and /proc/PID/task/TID/wchan give it: "do_epoll_wait",
// "pipe_write", "folio_wait_bit_common", "0" when running. Families are
// matched by substring, never by one exact name, since names change between
// kernels ("futex_wait_queue_me" became "futex_do_wait"; "pipe_write" is
// "anon_pipe_write" on Linux 6.x). Input is the name as read, or as
// sampler/procfs.h parse_wchan leaves it (a compiler clone suffix such as
// ".constprop.0" cut). Pure functions; never throw.
#pragma once

#include <string_view>

namespace stallscope::common {

enum class WchanFamily {
  none,     // running, or no wait channel ("0", "-", empty)
  storage,  // page I/O, fsync, journal, block layer, dirty-page throttling
  memory,   // reclaim, swap, a memory cgroup over its mark, compaction
  latch,    // epoll/poll/select and socket reads: waiting for the peer or for work
  futex,    // a futex: a lock or condition inside the process (an LWLock's semaphore)
  timer,    // nanosleep, hrtimer: asleep by choice (think time, a pacing loop)
  child,    // waiting for a child or a signal (a shell running its pipeline)
  // Other waits for input: an empty pipe or terminal, inotify, eventfd,
  // signalfd, timerfd, message queues, semaphores, AIO completions, a FUSE
  // daemon's request queue, a vCPU thread.
  input,
  other,  // held up in the kernel otherwise: a full pipe, a socket send buffer…
};

// The family of `wchan` (memory is tested before storage: swap reads and
// reclaim also wait on pages).
WchanFamily wchan_family(std::string_view wchan);

// Whether a sleep on `wchan` waits for something to do (families none,
// latch, futex, timer, child, input) rather than being held up in the
// kernel (storage, memory, other). The sampler's D-state-like test.
bool is_idle_wchan(std::string_view wchan);

// What a sleep on `wchan` is held up by, in words for a finding ("a full
// pipe: its reader does not keep up"); `backend`: the sleeper is a
// PostgreSQL backend, whose pipes and sockets are its log's. Empty when the
// table has no words for it.
std::string_view wchan_meaning(std::string_view wchan, bool backend);

}  // namespace stallscope::common
