// Private to sampler/: what a client process asleep in poll, select or
// epoll_wait waits for — whether its wait has a timeout, and whether one of
// the file descriptors it waits on is a connection to the database. That is
// what tells a client's think time inside an event loop (asleep until its
// own timer: asyncio's `await asyncio.sleep`) from a wait for the server's
// answer (a round trip), which the wait channel alone (do_epoll_wait) cannot.
//
// A Unix socket whose peer the process holds itself (asyncio's self-pipe, a
// socketpair) is no peer; a TCP socket or a Unix socket to another process
// is one (it may be the database, a pooler or the application's own client).
//
// Sources, per process (its main thread, as /proc/PID/wchan):
//   - /proc/PID/syscall: "NR ARG1 … ARG6 SP PC" of the blocked system call
//     (readable by whoever may ptrace the process: root, or the same user
//     for a descendant under Yama's ptrace_scope 1);
//   - the fds waited on: for epoll, the "tfd:" lines of
//     /proc/PID/fdinfo/EPFD; for poll and ppoll the pollfd array, and for
//     select and pselect6 the read and write fd_sets, read from
//     /proc/PID/mem at the call's argument addresses;
//   - each fd's link, /proc/PID/fd/N = "socket:[INODE]", and the peers of
//     Unix sockets from one sock_diag dump a tick (UNIX_DIAG_PEER).
// Anything unreadable gives nullopt or an unknown `on_database`: data, not
// an error.
//
//   detail::PollWaitReader reader("/proc");
//   reader.new_tick();
//   auto w = reader.read(pid);
//   if (w && w->timed && w->peer_sockets == 0) think_time();  // its own timer, no peer
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "schema/records.h"

namespace stallscope::sampler::detail {

// One line of /proc/PID/syscall for a task blocked in a system call.
struct BlockedSyscall {
  long number = -1;
  std::array<std::uint64_t, 6> args{};
};
// Parses "7 0x7ffd… 0x1 0xffffffffffffffff 0x0 0x0 0x0 0x7ffd… 0x7f…";
// nullopt for "running", "-1 …" (not in a system call) or malformed text.
std::optional<BlockedSyscall> parse_syscall(std::string_view text);

// The target fds of an epoll instance: the "tfd: N" lines of its fdinfo.
std::vector<int> parse_epoll_tfds(std::string_view fdinfo);

// The poll-like system calls: name (as stored in process_poll.syscall),
// whether it waits with a timeout, and where its fds are.
struct PollCall {
  std::string_view
      name;  // "poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2"
  bool timed = false;  // a finite timeout (a number ≥ 0, or a timeout pointer that is not NULL)
  enum class Fds { epoll, pollfd_array, fd_sets } fds = Fds::epoll;
  int epoll_fd = -1;                // Fds::epoll
  std::uint64_t array_address = 0;  // Fds::pollfd_array: struct pollfd[count]
  std::uint64_t read_set_address = 0, write_set_address = 0;  // Fds::fd_sets (0: none)
  std::uint64_t count = 0;  // nfds: array entries, or the highest fd + 1 of the sets
};
// The call a blocked syscall is, on this architecture; nullopt for any
// other system call.
std::optional<PollCall> poll_call(const BlockedSyscall& s);

// Reads what the processes asleep in a poll-like call wait on, caching per
// tick the one sock_diag dump of Unix socket peers it may need.
class PollWaitReader {
 public:
  explicit PollWaitReader(std::string proc_root) : proc_root_(std::move(proc_root)) {}
  // Forgets the cached peers: call once a tick.
  void new_tick() { peers_.reset(); }
  // nullopt when `pid` is not in a poll-like call or its syscall file
  // cannot be read; peer_sockets nullopt when its fds could not be read.
  std::optional<schema::PollWaitRow> read(int pid);

 private:
  const std::unordered_map<std::uint32_t, std::uint32_t>& unix_peers();
  std::string proc_root_;
  std::optional<std::unordered_map<std::uint32_t, std::uint32_t>> peers_;
};

// Every connected Unix socket of this network namespace, inode → its peer's
// inode, from one sock_diag dump (NETLINK_SOCK_DIAG, UDIAG_SHOW_PEER); empty
// when the kernel refuses it. (sockets.cpp)
std::unordered_map<std::uint32_t, std::uint32_t> unix_socket_peers();

// Whether a wait channel is a poll-like wait (epoll, poll, select).
bool is_poll_wchan(std::string_view wchan);

}  // namespace stallscope::sampler::detail
