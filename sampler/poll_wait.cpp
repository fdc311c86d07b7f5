// What a client asleep in poll, select, epoll_wait or a blocking socket read
// waits on (sampler/poll_wait.h).
#include "sampler/poll_wait.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_set>

#include "common/fd.h"
#include "common/parse.h"
#include "sampler/procfs.h"
#include "sampler/sampler.h"

namespace stallscope::sampler::detail {
namespace {

// At most this many fds of one wait are looked at (an event loop watching
// thousands is a server, not a database client).
constexpr std::uint64_t kMaxWaitedFds = 256;
// The largest fd_set read (bits): FD_SETSIZE.
constexpr std::uint64_t kMaxSelectFds = 1024;

std::optional<std::uint64_t> parse_u64(std::string_view t) {
  if (t.starts_with("0x")) {
    t.remove_prefix(2);
    std::uint64_t v = 0;
    if (t.empty() || t.size() > 16) return std::nullopt;
    for (const char c : t) {
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) return std::nullopt;
      v = v * 16 + static_cast<std::uint64_t>(d);
    }
    return v;
  }
  if (auto v = common::parse_int64(t); v && *v >= 0) return static_cast<std::uint64_t>(*v);
  return std::nullopt;
}

bool read_small_file(const std::string& path, std::string& out, std::size_t max_bytes) {
  common::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  out.resize(max_bytes);
  const ssize_t n = ::read(fd.get(), out.data(), out.size());
  if (n < 0) return false;
  out.resize(static_cast<std::size_t>(n));
  return true;
}

// `bytes` of `pid`'s memory at `address` (/proc/PID/mem; needs ptrace access).
bool read_memory(const std::string& proc_root, int pid, std::uint64_t address, void* out,
                 std::size_t bytes) {
  if (address == 0 || bytes == 0) return false;
  common::Fd fd(
      ::open((proc_root + "/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  return ::pread(fd.get(), out, bytes, static_cast<off_t>(address)) == static_cast<ssize_t>(bytes);
}

// The socket inode an fd links to ("socket:[INODE]"), 0 for anything else.
std::uint32_t socket_inode(const std::string& fd_dir, int fd) {
  char target[64];
  const std::string path = fd_dir + "/" + std::to_string(fd);
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
  if (n <= 9 || std::strncmp(target, "socket:[", 8) != 0) return 0;
  const auto inode =
      common::parse_int64(std::string_view(target + 8, static_cast<std::size_t>(n) - 9));
  return inode && *inode > 0 ? static_cast<std::uint32_t>(*inode) : 0;
}

// The fds a poll-like call waits on; nullopt when they cannot be read.
std::optional<std::vector<int>> waited_fds(const std::string& proc_root, int pid,
                                           const PollCall& call) {
  std::vector<int> fds;
  const std::string dir = proc_root + "/" + std::to_string(pid);
  switch (call.fds) {
    case PollCall::Fds::epoll: {
      std::string text;
      if (!read_small_file(dir + "/fdinfo/" + std::to_string(call.epoll_fd), text, 64 * 1024))
        return std::nullopt;
      fds = parse_epoll_tfds(text);
      break;
    }
    case PollCall::Fds::pollfd_array: {
      const auto n = std::min(call.count, kMaxWaitedFds);
      std::vector<pollfd> entries(n);
      if (n > 0 &&
          !read_memory(proc_root, pid, call.array_address, entries.data(), n * sizeof(pollfd)))
        return std::nullopt;
      for (const auto& e : entries) {
        if (e.fd >= 0) fds.push_back(e.fd);
      }
      break;
    }
    case PollCall::Fds::fd_sets: {
      const auto bits = std::min(call.count, kMaxSelectFds);
      const std::size_t bytes = (bits + 63) / 64 * 8;
      for (const auto address : {call.read_set_address, call.write_set_address}) {
        if (address == 0 || bytes == 0) continue;
        std::vector<std::uint64_t> words(bytes / 8);
        if (!read_memory(proc_root, pid, address, words.data(), bytes)) return std::nullopt;
        for (std::uint64_t fd = 0; fd < bits; ++fd) {
          if (words[fd / 64] >> (fd % 64) & 1) fds.push_back(static_cast<int>(fd));
        }
      }
      break;
    }
    case PollCall::Fds::one:
      fds.push_back(call.epoll_fd);
      break;
  }
  std::sort(fds.begin(), fds.end());
  fds.erase(std::unique(fds.begin(), fds.end()), fds.end());
  if (fds.size() > kMaxWaitedFds) fds.resize(kMaxWaitedFds);
  return fds;
}

// The inodes of every socket `pid` holds.
std::unordered_set<std::uint32_t> held_sockets(const std::string& fd_dir) {
  std::unordered_set<std::uint32_t> out;
  common::Dir dir(::opendir(fd_dir.c_str()));
  if (!dir) return out;
  while (const dirent* e = dir.read()) {
    if (e->d_name[0] == '.') continue;
    if (const auto fd = common::parse_int(e->d_name)) {
      if (const auto inode = socket_inode(fd_dir, *fd)) out.insert(inode);
    }
  }
  return out;
}

}  // namespace

std::optional<BlockedSyscall> parse_syscall(std::string_view text) {
  BlockedSyscall s;
  std::size_t field = 0;
  while (!text.empty() && field < 7) {
    const auto start = text.find_first_not_of(" \n");
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    const auto end = text.find_first_of(" \n");
    const auto token = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end);
    if (field == 0) {
      const auto nr = common::parse_int64(token);
      if (!nr || *nr < 0) return std::nullopt;  // "running", "-1 …"
      s.number = static_cast<long>(*nr);
    } else {
      const auto v = parse_u64(token);
      if (!v) return std::nullopt;
      s.args[field - 1] = *v;
    }
    ++field;
  }
  if (field < 7) return std::nullopt;
  return s;
}

std::vector<int> parse_epoll_tfds(std::string_view fdinfo) {
  std::vector<int> out;
  std::size_t pos = 0;
  while ((pos = fdinfo.find("tfd:", pos)) != std::string_view::npos) {
    pos += 4;
    const auto start = fdinfo.find_first_not_of(' ', pos);
    if (start == std::string_view::npos) break;
    const auto end = fdinfo.find_first_of(" \n", start);
    if (const auto fd = common::parse_int(fdinfo.substr(start, end - start)); fd && *fd >= 0)
      out.push_back(*fd);
  }
  return out;
}

std::optional<PollCall> poll_call(const BlockedSyscall& s) {
  const auto& a = s.args;
  // A timeout in ms as an int: -1 (or any negative) waits for ever.
  const auto timed_ms = [](std::uint64_t v) { return static_cast<std::int32_t>(v) >= 0; };
  // poll(fds, nfds, …) and ppoll: a pollfd array.
  const auto pollfd_call = [&a](std::string_view name, bool timed) {
    return PollCall{.name = name,
                    .timed = timed,
                    .fds = PollCall::Fds::pollfd_array,
                    .array_address = a[0],
                    .count = a[1]};
  };
  // select(nfds, read, write, except, timeout) and pselect6: fd_sets.
  const auto fd_set_call = [&a](std::string_view name) {
    return PollCall{.name = name,
                    .timed = a[4] != 0,
                    .fds = PollCall::Fds::fd_sets,
                    .read_set_address = a[1],
                    .write_set_address = a[2],
                    .count = a[0]};
  };
  const auto one_fd_call = [&a](std::string_view name) {
    return PollCall{.name = name,
                    .timed = false,
                    .fds = PollCall::Fds::one,
                    .epoll_fd = static_cast<int>(a[0])};
  };
  PollCall c;
  switch (s.number) {
#ifdef SYS_epoll_wait
    case SYS_epoll_wait:
      c = {.name = "epoll_wait", .timed = timed_ms(a[3]), .epoll_fd = static_cast<int>(a[0])};
      return c;
#endif
    case SYS_epoll_pwait:
      c = {.name = "epoll_pwait", .timed = timed_ms(a[3]), .epoll_fd = static_cast<int>(a[0])};
      return c;
#ifdef SYS_epoll_pwait2
    case SYS_epoll_pwait2:
      c = {.name = "epoll_pwait2", .timed = a[3] != 0, .epoll_fd = static_cast<int>(a[0])};
      return c;
#endif
#ifdef SYS_poll
    case SYS_poll:
      return pollfd_call("poll", timed_ms(a[2]));
#endif
    case SYS_ppoll:
      return pollfd_call("ppoll", a[2] != 0);
#ifdef SYS_select
    case SYS_select:
      return fd_set_call("select");
#endif
    case SYS_pselect6:
      return fd_set_call("pselect6");
    // A blocking read of one fd (libpq's own waits are polls; a client that
    // reads its socket without one, or a pipe, blocks here).
    case SYS_read:
      return one_fd_call("read");
    case SYS_readv:
      return one_fd_call("readv");
    case SYS_recvfrom:
      return one_fd_call("recvfrom");
    case SYS_recvmsg:
      return one_fd_call("recvmsg");
    default:
      return std::nullopt;
  }
}

const UnixSockets& PollWaitReader::unix_table() {
  if (!unix_) unix_ = unix_sockets();
  return *unix_;
}

const std::unordered_map<std::uint32_t, PollWaitReader::TcpEnd>& PollWaitReader::tcp_ends() {
  if (tcp_remote_port_) return *tcp_remote_port_;
  tcp_remote_port_.emplace();
  for (const auto& s : tcp_sockets(proc_root_)) {
    if (!s.listening)
      (*tcp_remote_port_)[s.inode] = {.remote_port = s.remote_port, .queued = s.queued_bytes > 0};
  }
  return *tcp_remote_port_;
}

std::optional<schema::PollWaitRow> PollWaitReader::read(
    int pid, const std::unordered_set<int>& database_ports, int tid) {
  const std::string dir = proc_root_ + "/" + std::to_string(pid);
  std::string text;
  const std::string task = tid > 0 ? dir + "/task/" + std::to_string(tid) : dir;
  if (!read_small_file(task + "/syscall", text, 256)) return std::nullopt;
  const auto blocked = parse_syscall(text);
  if (!blocked) return std::nullopt;
  const auto call = poll_call(*blocked);
  if (!call) return std::nullopt;
  schema::PollWaitRow row{.syscall = std::string(call->name), .timed = call->timed};
  const auto fds = waited_fds(proc_root_, pid, *call);
  if (!fds) return row;
  const std::string fd_dir = dir + "/fd";
  int peers = 0, database = 0, queued = 0;
  std::optional<std::unordered_set<std::uint32_t>> held;
  for (const int fd : *fds) {
    const auto inode = socket_inode(fd_dir, fd);
    if (inode == 0) continue;  // a pipe, eventfd, timerfd, file: no peer
    const auto& unix = unix_table();
    if (const auto it = unix.peers.find(inode); it != unix.peers.end()) {
      if (!held) held = held_sockets(fd_dir);
      if (held->contains(it->second)) continue;  // its own socketpair
      ++peers;
      if (unix.postgres_named.contains(it->second)) {
        ++database;
        // A query the server has not read, or an answer the client has not.
        if (unix.queued.contains(it->second) || unix.queued.contains(inode)) ++queued;
      }
      continue;
    }
    const auto& tcp = tcp_ends();
    if (const auto it = tcp.find(inode); it != tcp.end()) {
      ++peers;
      if (database_ports.contains(it->second.remote_port)) {
        ++database;
        if (it->second.queued) ++queued;
      }
      continue;
    }
    // Another kind of socket (UDP, netlink, a listening socket): a peer of
    // no one in particular, never the database.
    ++peers;
  }
  row.peer_sockets = peers;
  row.database_sockets = database;
  row.database_queued = queued;
  return row;
}

}  // namespace stallscope::sampler::detail

namespace stallscope::sampler {

void ClientWatch::add_pid(int pid) {
  std::lock_guard lock(mutex_);
  pids_.insert(pid);
  ++version_;
}

void ClientWatch::add_comm(std::string comm) {
  std::lock_guard lock(mutex_);
  comms_.push_back(std::move(comm));
  ++version_;
}

void ClientWatch::add_database_port(int port) {
  std::lock_guard lock(mutex_);
  if (port > 0 && database_ports_.insert(port).second) ++version_;
}

void ClientWatch::refresh(Snapshot& copy) const {
  if (version_.load() == copy.version) return;
  std::lock_guard lock(mutex_);
  copy.version = version_.load();
  copy.pids = pids_;
  copy.comms = comms_;
  copy.database_ports = database_ports_;
}

}  // namespace stallscope::sampler
