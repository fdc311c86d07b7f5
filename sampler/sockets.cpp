// Finding a database session's client process on this host: the owner of
// the TCP socket whose local port is the session's client_port (and whose
// remote port is the server's), through /proc/net/tcp{,6} and
// /proc/PID/fd; and a process's start time from /proc/PID/stat.
#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <unordered_set>

#include "common/fd.h"
#include "common/parse.h"
#include "sampler/procfs.h"
#include "sampler/sampler.h"

namespace stallscope::sampler {
namespace {

// Links ("socket:[INODE]") of the sockets in `table` (/proc/net/tcp or
// tcp6) with the given local and remote ports (detail::parse_tcp_socket_links).
void add_socket_inodes(const std::string& table, int local_port, int remote_port,
                       std::unordered_set<std::string>& inodes) {
  std::ifstream in(table);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (auto& link : detail::parse_tcp_socket_links(text, local_port, remote_port)) {
    inodes.insert(std::move(link));
  }
}

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

}  // namespace

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

std::optional<SocketOwner> tcp_socket_owner(int local_port, int remote_port,
                                            const std::string& proc_root) {
  if (local_port <= 0 || remote_port <= 0) return std::nullopt;
  std::unordered_set<std::string> links;
  add_socket_inodes(proc_root + "/net/tcp", local_port, remote_port, links);
  add_socket_inodes(proc_root + "/net/tcp6", local_port, remote_port, links);
  if (links.empty()) return std::nullopt;  // not on this host (or already closed)
  common::Dir proc(::opendir(proc_root.c_str()));
  if (!proc) return std::nullopt;
  const int self = static_cast<int>(::getpid());
  while (const dirent* e = proc.read()) {
    const auto pid = common::parse_int(e->d_name);
    if (!pid || *pid == self) continue;
    if (!holds_one_of(proc_root + "/" + e->d_name + "/fd", links)) continue;
    if (auto start = process_start_ticks(*pid, proc_root)) {
      return SocketOwner{.pid = *pid, .start_ticks = *start};
    }
  }
  return std::nullopt;
}

}  // namespace stallscope::sampler
