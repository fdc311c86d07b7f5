// Private to sampler/: what a client process asleep in poll, select,
// epoll_wait or a blocking socket read waits for — whether its wait has a
// timeout, how many of the file descriptors it waits on are sockets to
// another process, and how many are connections to the database. That is
// what tells a client's think time inside an event loop (asleep until its
// own timer: asyncio's `await asyncio.sleep`), a wait for the server's answer
// (a round trip) and a wait for anything else (its own HTTP clients, another
// service, a pipe) apart, which the wait channel alone (do_epoll_wait) cannot.
//
// A Unix socket whose peer the process holds itself (asyncio's self-pipe, a
// socketpair) is no peer; a TCP socket or a Unix socket to another process
// is one. A database socket is a TCP socket whose remote port is one of the
// database ports (the server's, a pooler's: ClientWatch) or a Unix socket
// whose peer is bound to a name with "/.s.PGSQL." in it (libpq's socket
// file name, which PostgreSQL and every pooler use). For a wait on a
// database socket among other peers (an event loop that keeps its
// connection registered while it waits for its own clients), whether bytes
// are queued on that connection (a query on its way to the server, or an
// answer not yet read) says whether a query is outstanding at that moment.
//
// Sources, per process (its main thread, as /proc/PID/wchan):
//   - /proc/PID/syscall: "NR ARG1 … ARG6 SP PC" of the blocked system call
//     (readable by whoever may ptrace the process: root, or the same user
//     for a descendant under Yama's ptrace_scope 1);
//   - the fds waited on: for epoll, the "tfd:" lines of
//     /proc/PID/fdinfo/EPFD; for poll and ppoll the pollfd array, and for
//     select and pselect6 the read and write fd_sets, read from
//     /proc/PID/mem at the call's argument addresses;
//     (a blocking read, readv, recvfrom or recvmsg waits on its one fd);
//   - each fd's link, /proc/PID/fd/N = "socket:[INODE]"; the peers and
//     names of Unix sockets from one sock_diag dump a tick (UNIX_DIAG_PEER,
//     UNIX_DIAG_NAME), the remote ports of TCP sockets from one read of
//     /proc/net/tcp and tcp6 a tick.
// Anything unreadable gives nullopt or an unknown `on_database`: data, not
// an error.
//
//   detail::PollWaitReader reader("/proc");
//   reader.new_tick();
//   auto w = reader.read(pid, {5432, 6432});
//   if (w && w->database_sockets > 0) round_trip();
//   else if (w && w->timed && w->peer_sockets == 0) think_time();  // its own timer
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
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

// The system calls that wait on fds: name (as stored in
// process_poll.syscall), whether it waits with a timeout, and where its fds
// are.
struct PollCall {
  std::string_view name;  // "poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait",
                          // "epoll_pwait2", "read", "readv", "recvfrom", "recvmsg"
  bool timed = false;  // a finite timeout (a number ≥ 0, or a timeout pointer that is not NULL)
  enum class Fds { epoll, pollfd_array, fd_sets, one } fds = Fds::epoll;
  int epoll_fd = -1;                // Fds::epoll; Fds::one: the fd read
  std::uint64_t array_address = 0;  // Fds::pollfd_array: struct pollfd[count]
  std::uint64_t read_set_address = 0, write_set_address = 0;  // Fds::fd_sets (0: none)
  std::uint64_t count = 0;  // nfds: array entries, or the highest fd + 1 of the sets
};
// The call a blocked syscall is, on this architecture; nullopt for any
// other system call.
std::optional<PollCall> poll_call(const BlockedSyscall& s);

// Every connected Unix socket of this network namespace, from one sock_diag
// dump (NETLINK_SOCK_DIAG, UDIAG_SHOW_PEER | UDIAG_SHOW_NAME); empty when
// the kernel refuses it. (sockets.cpp)
struct UnixSockets {
  std::unordered_map<std::uint32_t, std::uint32_t> peers;  // inode → its peer's inode
  // Inodes of sockets bound to (or accepted on) a name holding "/.s.PGSQL.".
  std::unordered_set<std::uint32_t> postgres_named;
  // Inodes of sockets with bytes in their receive queue (UNIX_DIAG_RQLEN).
  std::unordered_set<std::uint32_t> queued;
};
UnixSockets unix_sockets();

// Reads what the processes asleep in a call that waits on fds wait on,
// caching per tick the one sock_diag dump and the TCP tables it may need.
class PollWaitReader {
 public:
  explicit PollWaitReader(std::string proc_root) : proc_root_(std::move(proc_root)) {}
  // Forgets the cached socket tables: call once a tick.
  void new_tick() {
    unix_.reset();
    tcp_remote_port_.reset();
  }
  // nullopt when `pid` is not in a call that waits on fds or its syscall
  // file cannot be read; peer_sockets and database_sockets nullopt when its
  // fds could not be read. `database_ports`: remote TCP ports that are the
  // database's (the server's, its poolers').
  // `tid`: one of its threads (its syscall from proc_root/PID/task/TID; the
  // fds and memory are the process's), or 0 for the process (its main
  // thread).
  std::optional<schema::PollWaitRow> read(int pid, const std::unordered_set<int>& database_ports,
                                          int tid = 0);

 private:
  const UnixSockets& unix_table();
  struct TcpEnd {
    int remote_port = 0;
    bool queued = false;  // bytes in its send or receive queue
  };
  const std::unordered_map<std::uint32_t, TcpEnd>& tcp_ends();
  std::string proc_root_;
  std::optional<UnixSockets> unix_;
  std::optional<std::unordered_map<std::uint32_t, TcpEnd>> tcp_remote_port_;  // by inode
};

// The TCP ports `pid` listens on (its LISTEN sockets in /proc/net/tcp and
// tcp6), sorted; empty when its fds cannot be read. (sockets.cpp)
std::vector<int> listening_ports(int pid, const std::string& proc_root);

}  // namespace stallscope::sampler::detail
