// Finding a database session's client process on this host: the owner of
// the TCP socket whose local port is the session's client_port (and whose
// remote port is the server's), through /proc/net/tcp{,6} and
// /proc/PID/fd; over a Unix socket, the owner of the peer of the backend's
// socket (sock_diag's UNIX_DIAG_PEER); and a process's start time from
// /proc/PID/stat.
#include <dirent.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <unordered_set>

#include "common/fd.h"
#include "common/parse.h"
#include "sampler/poll_wait.h"
#include "sampler/procfs.h"
#include "sampler/sampler.h"

namespace stallscope::sampler {
namespace {

// Whether one of PID's open files (proc_root/PID/fd/*) is one of `links`.
bool holds_one_of(const std::string& fd_dir, const std::unordered_set<std::string>& links) {
  common::Dir dir(::opendir(fd_dir.c_str()));
  if (!dir) return false;  // gone, or not ours to read
  char target[64];
  while (const dirent* e = dir.read()) {
    if (e->d_name[0] == '.') continue;
    const std::string path = fd_dir + "/" + e->d_name;
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    if (links.contains(std::string(target, static_cast<std::size_t>(n)))) return true;
  }
  return false;
}

// The links ("socket:[INODE]") of the sockets among PID's open files.
std::unordered_set<std::string> socket_links(const std::string& fd_dir) {
  std::unordered_set<std::string> out;
  common::Dir dir(::opendir(fd_dir.c_str()));
  if (!dir) return out;
  char target[64];
  while (const dirent* e = dir.read()) {
    if (e->d_name[0] == '.') continue;
    const std::string path = fd_dir + "/" + e->d_name;
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n > 8 && std::strncmp(target, "socket:[", 8) == 0) {
      out.emplace(target, static_cast<std::size_t>(n));
    }
  }
  return out;
}

}  // namespace

detail::UnixSockets detail::unix_sockets() {
  UnixSockets out;
  auto& peers = out.peers;
  common::Fd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!fd) return out;
  struct {
    nlmsghdr header;
    unix_diag_req request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.request.sdiag_family = AF_UNIX;
  message.request.udiag_states = ~0u;
  message.request.udiag_show = UDIAG_SHOW_PEER | UDIAG_SHOW_NAME | UDIAG_SHOW_RQLEN;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0)
    return out;
  alignas(nlmsghdr) char buffer[32768];
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buffer, sizeof buffer, 0);
    if (n <= 0) return out;
    auto left = static_cast<unsigned>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, left);
         h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) return out;
      const auto* msg = static_cast<const unix_diag_msg*>(NLMSG_DATA(h));
      auto attr_len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *msg));
      for (auto* a = reinterpret_cast<rtattr*>(const_cast<unix_diag_msg*>(msg) + 1);
           RTA_OK(a, attr_len); a = RTA_NEXT(a, attr_len)) {
        if (a->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(a) >= sizeof(std::uint32_t)) {
          std::uint32_t peer = 0;
          std::memcpy(&peer, RTA_DATA(a), sizeof peer);
          if (peer != 0) peers[msg->udiag_ino] = peer;
        } else if (a->rta_type == UNIX_DIAG_RQLEN && RTA_PAYLOAD(a) >= sizeof(unix_diag_rqlen)) {
          // A connected stream socket: bytes in its receive queue.
          unix_diag_rqlen q{};
          std::memcpy(&q, RTA_DATA(a), sizeof q);
          if (msg->udiag_state != TCP_LISTEN && q.udiag_rqueue > 0)
            out.queued.insert(msg->udiag_ino);
        } else if (a->rta_type == UNIX_DIAG_NAME) {
          // A path name (abstract names start with a NUL): an accepted
          // socket carries its listening socket's name.
          const std::string_view name(static_cast<const char*>(RTA_DATA(a)), RTA_PAYLOAD(a));
          if (name.find("/.s.PGSQL.") != std::string_view::npos)
            out.postgres_named.insert(msg->udiag_ino);
        }
      }
    }
  }
}

namespace {

// The first process (but `skip` and stallscope) holding one of `links`.
std::optional<SocketOwner> owner_of(const std::unordered_set<std::string>& links,
                                    const std::string& proc_root, int skip) {
  common::Dir proc(::opendir(proc_root.c_str()));
  if (!proc) return std::nullopt;
  const int self = static_cast<int>(::getpid());
  while (const dirent* e = proc.read()) {
    const auto pid = common::parse_int(e->d_name);
    if (!pid || *pid == self || *pid == skip) continue;
    if (!holds_one_of(proc_root + "/" + e->d_name + "/fd", links)) continue;
    if (auto start = process_start_ticks(*pid, proc_root)) {
      std::ifstream in(proc_root + "/" + e->d_name + "/comm");
      std::string comm;
      std::getline(in, comm);
      return SocketOwner{.pid = *pid, .start_ticks = *start, .comm = std::move(comm)};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<SocketOwner> unix_socket_owner(int backend_pid, const std::string& proc_root) {
  if (backend_pid <= 0) return std::nullopt;
  const auto own = socket_links(proc_root + "/" + std::to_string(backend_pid) + "/fd");
  if (own.empty()) return std::nullopt;
  const auto peers = detail::unix_sockets().peers;
  std::unordered_set<std::string> links;
  for (const auto& link : own) {
    // "socket:[INODE]"
    const auto inode = common::parse_int64(std::string_view(link).substr(8, link.size() - 9));
    if (!inode) continue;
    if (auto it = peers.find(static_cast<std::uint32_t>(*inode)); it != peers.end())
      links.insert("socket:[" + std::to_string(it->second) + "]");
  }
  if (links.empty()) return std::nullopt;
  return owner_of(links, proc_root, backend_pid);
}

std::optional<std::int64_t> process_start_ticks(int pid, const std::string& proc_root) {
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  // Fields after the comm's closing parenthesis start at field 3 (state).
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  for (int n = 3; fields >> field; ++n) {
    if (n == 22) return common::parse_int64(field);
  }
  return std::nullopt;
}

std::vector<SocketOwner> descendant_processes(int pid, const std::string& proc_root) {
  std::unordered_map<int, std::vector<SocketOwner>> children;  // ppid → children
  common::Dir proc(::opendir(proc_root.c_str()));
  if (!proc) return {};
  while (const dirent* e = proc.read()) {
    if (!common::parse_int(e->d_name)) continue;
    std::ifstream in(proc_root + "/" + e->d_name + "/stat");
    std::string text;
    if (!std::getline(in, text)) continue;
    if (const auto st = detail::parse_pid_stat(text))
      children[st->ppid].push_back({.pid = st->pid, .start_ticks = st->start_ticks, .comm = {}});
  }
  std::vector<SocketOwner> out;
  std::vector<std::pair<int, std::int64_t>> todo{
      {pid, process_start_ticks(pid, proc_root).value_or(0)}};
  while (!todo.empty()) {
    const auto [parent, parent_start] = todo.back();
    todo.pop_back();
    const auto it = children.find(parent);
    if (it == children.end()) continue;
    for (const auto& c : it->second) {
      if (c.start_ticks < parent_start || c.pid == pid) continue;  // an older pid reused
      out.push_back(c);
      todo.emplace_back(c.pid, c.start_ticks);
    }
  }
  return out;
}

bool process_alive(int pid, std::int64_t start_ticks, const std::string& proc_root) {
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  const auto st = detail::parse_pid_stat(text);
  return st && st->start_ticks == start_ticks && st->state != 'Z' && st->state != 'X';
}

std::vector<detail::TcpSocket> detail::tcp_sockets(const std::string& proc_root) {
  std::vector<TcpSocket> out;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in(proc_root + table);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto sockets = parse_tcp_sockets(text);
    out.insert(out.end(), sockets.begin(), sockets.end());
  }
  return out;
}

std::vector<int> detail::listening_ports(int pid, const std::string& proc_root) {
  std::vector<int> out;
  const auto held = socket_links(proc_root + "/" + std::to_string(pid) + "/fd");
  if (held.empty()) return out;
  for (const auto& s : detail::tcp_sockets(proc_root)) {
    if (s.listening && held.contains("socket:[" + std::to_string(s.inode) + "]"))
      out.push_back(s.local_port);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<SocketOwner> tcp_socket_owner(int local_port, int remote_port,
                                            const std::string& proc_root) {
  if (local_port <= 0 || remote_port <= 0) return std::nullopt;
  std::unordered_set<std::string> links;
  for (const auto& s : detail::tcp_sockets(proc_root)) {
    if (s.local_port == local_port && s.remote_port == remote_port)
      links.insert("socket:[" + std::to_string(s.inode) + "]");
  }
  if (links.empty()) return std::nullopt;  // not on this host (or already closed)
  return owner_of(links, proc_root, 0);
}

}  // namespace stallscope::sampler
