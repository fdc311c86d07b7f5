#include "sampler/procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "common/conninfo.h"
#include "common/fd.h"
#include "common/parse.h"
#include "common/units.h"

namespace stallscope::sampler::detail {
namespace {

// include/linux/sched.h: set in do_exit(), before the task's cgroup and mm go.
constexpr std::int64_t kPfExiting = 0x4;

}  // namespace

bool is_exiting(const PidStat& st) {
  return st.exiting || st.state == 'Z' || st.state == 'X';
}

// stat's rss (pages) in bytes; nullopt when the product would not fit, as
// in no real /proc.
std::optional<std::int64_t> rss_bytes(std::int64_t pages, std::int64_t page_bytes) {
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(pages, page_bytes, &bytes)) return std::nullopt;
  return bytes;
}

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n';
}

std::string_view skip_spaces(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

// The blank-free token at the start of `s`.
std::string_view token(std::string_view s) {
  std::size_t end = 0;
  while (end < s.size() && !is_space(s[end])) ++end;
  return s.substr(0, end);
}

// Parses the non-negative integer that the first token of `s` (after blanks)
// must be, and removes it from `s`; nullopt when the token is anything else
// ("12x", "-1", empty).
std::optional<std::int64_t> take_count(std::string_view& s) {
  s = skip_spaces(s);
  const std::string_view tok = token(s);
  const auto value = common::parse_int64(tok);
  if (!value || *value < 0) return std::nullopt;
  s.remove_prefix(tok.size());
  return value;
}

// Value of the status line "<key>:\t<count>".
std::optional<std::int64_t> status_field(std::string_view text, std::string_view key) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ':') {
      std::string_view rest = line.substr(key.size() + 1);
      auto value = take_count(rest);
      if (!value || !skip_spaces(rest).empty()) return std::nullopt;
      return value;
    }
    pos = eol + 1;
  }
  return std::nullopt;
}

}  // namespace

std::string pid_path(const std::string& proc_root, int pid, std::string_view file) {
  return fmt::format("{}/{}/{}", proc_root, pid, file);
}

bool read_proc_file(const std::string& path, std::string& out, std::size_t max_bytes) {
  out.clear();
  const common::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  bool ok = true;
  char buf[4096];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;  // e.g. ESRCH: the process exited between open and read
      break;
    }
    if (n == 0) break;
    out.append(buf, std::min(static_cast<std::size_t>(n), max_bytes - out.size()));
  }
  return ok;
}

std::optional<Schedstat> parse_schedstat(std::string_view text) {
  auto on_cpu = take_count(text);
  auto delay = on_cpu ? take_count(text) : std::nullopt;
  auto slices = delay ? take_count(text) : std::nullopt;
  if (!slices || !skip_spaces(text).empty()) return std::nullopt;
  return Schedstat{.on_cpu_ns = *on_cpu, .run_delay_ns = *delay, .timeslices = *slices};
}

std::optional<Schedstat> read_schedstat(const std::string& proc_root, int pid) {
  std::string text;
  if (!read_proc_file(pid_path(proc_root, pid, "schedstat"), text, 256)) return std::nullopt;
  return parse_schedstat(text);
}

std::optional<ContextSwitches> parse_status_context_switches(std::string_view text) {
  auto voluntary = status_field(text, "voluntary_ctxt_switches");
  auto nonvoluntary = status_field(text, "nonvoluntary_ctxt_switches");
  if (!voluntary || !nonvoluntary) return std::nullopt;
  return ContextSwitches{.voluntary = *voluntary, .nonvoluntary = *nonvoluntary};
}

std::optional<Schedstat> read_schedstat_all_threads(const std::string& proc_root, int pid) {
  std::error_code ec;
  std::filesystem::directory_iterator it(fmt::format("{}/{}/task", proc_root, pid), ec);
  if (ec) return std::nullopt;
  std::optional<Schedstat> sum;
  for (const auto& entry : it) {
    std::string text;
    if (!read_proc_file(entry.path().string() + "/schedstat", text, 256)) continue;
    auto one = parse_schedstat(text);
    if (!one) continue;
    if (!sum) sum = Schedstat{};
    sum->on_cpu_ns += one->on_cpu_ns;
    sum->run_delay_ns += one->run_delay_ns;
    sum->timeslices += one->timeslices;
  }
  return sum;
}

std::optional<ContextSwitches> read_context_switches(const std::string& proc_root, int pid) {
  std::string text;
  if (!read_proc_file(pid_path(proc_root, pid, "status"), text)) return std::nullopt;
  return parse_status_context_switches(text);
}

std::optional<std::string> parse_wchan(std::string_view text) {
  // A compiler clone suffix (".constprop.0", ".isra.0", ".part.0", ".cold")
  // names no other function: cut it (kernel symbols have no other '.').
  text = text.substr(0, text.find_first_of(". \t\n"));
  if (text.empty() || text == "0" || text == "-" || text == "?") return std::nullopt;
  return std::string(text);
}

std::optional<std::string> read_wchan(const std::string& proc_root, int pid) {
  std::string text;
  if (!read_proc_file(pid_path(proc_root, pid, "wchan"), text, 256)) return std::nullopt;
  return parse_wchan(text);
}

std::vector<std::string> split_cmdline(std::string_view text) {
  std::vector<std::string> args;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nul = text.find('\0', pos);
    if (nul == std::string_view::npos) nul = text.size();
    args.emplace_back(text.substr(pos, nul - pos));
    pos = nul + 1;
  }
  while (!args.empty() && args.back().empty()) args.pop_back();
  return args;
}

std::optional<std::vector<std::string>> read_cmdline(const std::string& proc_root, int pid) {
  std::string text;
  if (!read_proc_file(pid_path(proc_root, pid, "cmdline"), text, 256 * common::kBytesPerKiB)) {
    return std::nullopt;
  }
  auto args = split_cmdline(text);
  if (args.empty()) return std::nullopt;
  return args;
}

// ---------------------------------------------------------------------------
// Sampler depth readers.

namespace {

// Value after "<key>=" in a PSI line, e.g. total=123.
std::optional<std::int64_t> psi_total(std::string_view line) {
  const std::size_t pos = line.find("total=");
  if (pos == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(pos + 6);
  return take_count(rest);
}

// Value of a "<key> <count>" line (cpu.stat) or "<key>: <count>" (io).
std::optional<std::int64_t> keyed_field(std::string_view text, std::string_view key) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key &&
        (line[key.size()] == ' ' || line[key.size()] == ':')) {
      std::string_view rest = line.substr(key.size() + (line[key.size()] == ':' ? 1 : 0));
      auto value = take_count(rest);
      if (value && skip_spaces(rest).empty()) return value;
      return std::nullopt;
    }
    pos = eol + 1;
  }
  return std::nullopt;
}

}  // namespace

PressureTotals parse_pressure(std::string_view text) {
  PressureTotals p;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.starts_with("some ")) p.some_us = psi_total(line);
    if (line.starts_with("full ")) p.full_us = psi_total(line);
    pos = eol + 1;
  }
  return p;
}

std::optional<PressureTotals> read_pressure(const std::string& proc_root,
                                            std::string_view resource) {
  std::string text;
  if (!read_proc_file(fmt::format("{}/pressure/{}", proc_root, resource), text, 1024)) {
    return std::nullopt;
  }
  return parse_pressure(text);
}

std::optional<IoBytes> parse_io(std::string_view text) {
  auto r = keyed_field(text, "read_bytes");
  auto w = keyed_field(text, "write_bytes");
  if (!r || !w) return std::nullopt;
  return IoBytes{.read_bytes = *r, .write_bytes = *w};
}

std::optional<IoBytes> read_io(const std::string& proc_root, int pid) {
  std::string text;
  if (!read_proc_file(pid_path(proc_root, pid, "io"), text, 1024)) return std::nullopt;
  return parse_io(text);
}

std::optional<CgroupRef> parse_cgroup(std::string_view text) {
  std::optional<CgroupRef> v2;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    const std::size_t c1 = line.find(':');
    const std::size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string_view path = line.substr(c2 + 1);
    if (path.empty()) continue;
    if (line.substr(0, c1) == "0" && controllers.empty()) {
      v2 = CgroupRef{.path = std::string(path), .v1 = false};
      continue;
    }
    // v1: the hierarchy whose comma-separated controllers include "cpu".
    std::size_t from = 0;
    while (from <= controllers.size()) {
      std::size_t comma = controllers.find(',', from);
      if (comma == std::string_view::npos) comma = controllers.size();
      if (controllers.substr(from, comma - from) == "cpu") {
        return CgroupRef{.path = std::string(path), .v1 = true};
      }
      from = comma + 1;
    }
  }
  return v2;
}

std::optional<CgroupRef> read_cgroup(const std::string& proc_root, int pid) {
  std::string text;
  if (!read_proc_file(pid_path(proc_root, pid, "cgroup"), text, 8192)) return std::nullopt;
  return parse_cgroup(text);
}

CpuThrottle parse_cpu_stat(std::string_view text) {
  CpuThrottle t{.nr_periods = keyed_field(text, "nr_periods"),
                .nr_throttled = keyed_field(text, "nr_throttled"),
                .throttled_ns = keyed_field(text, "throttled_time")};
  if (!t.throttled_ns) {
    // A count of µs past 2^63 ns (292 years) is no kernel's: left out.
    if (auto us = keyed_field(text, "throttled_usec");
        us && *us <= std::numeric_limits<std::int64_t>::max() / common::kNsPerUs) {
      t.throttled_ns = *us * common::kNsPerUs;
    }
  }
  return t;
}

std::optional<CpuThrottle> read_cpu_throttle(const std::string& cgroup_root, const CgroupRef& ref) {
  const std::string path = ref.path == "/" ? std::string() : ref.path;
  const std::string candidates[2] = {
      ref.v1 ? fmt::format("{}/cpu,cpuacct{}/cpu.stat", cgroup_root, path)
             : fmt::format("{}{}/cpu.stat", cgroup_root, path),
      ref.v1 ? fmt::format("{}/cpu{}/cpu.stat", cgroup_root, path)
             : fmt::format("{}/unified{}/cpu.stat", cgroup_root, path)};
  std::string text;
  for (const auto& c : candidates) {
    if (read_proc_file(c, text, 4096)) return parse_cpu_stat(text);
  }
  return std::nullopt;
}

std::optional<TaskStat> parse_task_stat(std::string_view text) {
  const std::size_t open = text.find('(');
  const std::size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  TaskStat t;
  t.comm = std::string(text.substr(open + 1, close - open - 1));
  // Fields from 3 (state) on, blank-separated.
  std::string_view rest = text.substr(close + 1);
  int field = 3;
  while (true) {
    rest = skip_spaces(rest);
    if (rest.empty()) break;
    const std::string_view tok = token(rest);
    if (field == 3) t.state = tok.empty() ? '?' : tok.front();
    if (field == 22 || field == 42) {
      const auto v = common::parse_int64(tok);  // the whole field, or the row is malformed
      if (!v) return std::nullopt;
      (field == 22 ? t.start_ticks : t.blkio_ticks) = *v;
    }
    rest.remove_prefix(tok.size());
    if (++field > 42) break;
  }
  if (field < 23) return std::nullopt;
  return t;
}

std::optional<std::string> parse_kernel_stack(std::string_view text) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.starts_with("[<")) {
      const std::size_t b = line.find("] ");
      if (b != std::string_view::npos) line.remove_prefix(b + 2);
    }
    if (line.empty()) continue;
    if (!out.empty()) out += '\n';
    out += line;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<std::string> read_kernel_stack(const std::string& path) {
  std::string text;
  if (!read_proc_file(path, text, 16384)) return std::nullopt;
  return parse_kernel_stack(text);
}

namespace {

// The port of a /proc/net/tcp address ("0100007F:1F90"): the hexadecimal
// digits after the last ':', or -1.
int tcp_port_of(std::string_view address) {
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos) return -1;
  const auto port = common::parse_integer<int>(address.substr(colon + 1), 16);
  return port && *port >= 0 ? *port : -1;
}

}  // namespace

std::vector<TcpSocket> parse_tcp_sockets(std::string_view text) {
  std::vector<TcpSocket> out;
  std::size_t pos = text.find('\n');  // after the header
  while (pos != std::string_view::npos && pos < text.size()) {
    std::size_t eol = text.find('\n', pos + 1);
    std::string_view line = text.substr(
        pos + 1, eol == std::string_view::npos ? std::string_view::npos : eol - pos - 1);
    pos = eol;
    std::string_view fields[10];
    std::size_t n = 0;
    for (line = skip_spaces(line); n < 10 && !line.empty(); line = skip_spaces(line)) {
      fields[n] = token(line);
      line.remove_prefix(fields[n].size());
      ++n;
    }
    if (n < 10) continue;
    const auto inode = common::parse_int64(fields[9]);
    const int local = tcp_port_of(fields[1]), remote = tcp_port_of(fields[2]);
    if (!inode || *inode <= 0 || *inode > 0xffffffffLL || local < 0 || remote < 0) continue;
    // "tx_queue:rx_queue", two hexadecimal counts.
    std::int64_t queued = 0;
    const auto colon = fields[4].find(':');
    if (colon != std::string_view::npos) {
      for (const auto part : {fields[4].substr(0, colon), fields[4].substr(colon + 1)}) {
        if (const auto v = common::parse_integer<std::int64_t>(part, 16); v && *v > 0) queued += *v;
      }
    }
    out.push_back({.inode = static_cast<std::uint32_t>(*inode),
                   .local_port = local,
                   .remote_port = remote,
                   .listening = fields[3] == "0A",
                   .queued_bytes = queued});
  }
  return out;
}

std::optional<std::int64_t> parse_loadavg_last_pid(std::string_view text) {
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  const std::size_t space = text.rfind(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::string_view field = text.substr(space + 1);
  return take_count(field);
}

std::optional<PidStat> parse_pid_stat(std::string_view text) {
  const std::size_t open = text.find('(');
  const std::size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  PidStat p;
  std::string_view head = text.substr(0, open);
  auto pid = take_count(head);
  if (!pid) return std::nullopt;
  p.pid = static_cast<int>(*pid);
  p.comm = std::string(text.substr(open + 1, close - open - 1));
  std::string_view rest = text.substr(close + 1);
  int field = 3;
  while (field <= 42) {
    rest = skip_spaces(rest);
    if (rest.empty()) break;
    const std::string_view tok = token(rest);
    rest.remove_prefix(tok.size());
    if (field == 3) {
      p.state = tok.front();
    } else if (field == 4 || field == 9 || field == 12 || field == 14 || field == 15 ||
               field == 20 || field == 22 || field == 24 || field == 42) {
      const auto parsed = common::parse_int64(tok);  // the whole field, or the row is malformed
      if (!parsed) return std::nullopt;
      const std::int64_t v = *parsed;
      switch (field) {
        case 4:
          p.ppid = static_cast<int>(v);
          break;
        case 9:
          p.exiting = (v & kPfExiting) != 0;
          break;
        case 12:
          p.majflt = v;
          break;
        case 14:
          p.utime_ticks = v;
          break;
        case 15:
          p.stime_ticks = v;
          break;
        case 20:
          p.threads = static_cast<int>(v);
          break;
        case 22:
          p.start_ticks = v;
          break;
        case 24:
          p.rss_pages = v;
          break;
        default:
          p.blkio_ticks = v;
          break;
      }
    }
    ++field;
  }
  if (field <= 24) return std::nullopt;
  return p;
}

ProcScanner::ProcScanner(std::string proc_root) : root_(std::move(proc_root)) {
  buf_.reserve(1024);
}

std::size_t ProcScanner::open_files() const noexcept {
  std::size_t n = static_cast<bool>(loadavg_fd_);
  for (const auto& [pid, f] : files_) {
    n += static_cast<bool>(f.stat_fd) + static_cast<bool>(f.schedstat_fd);
  }
  return n;
}

// Reads a kept file from offset 0 (opening it first if needed); on a read
// failure of a kept descriptor (its process exited), reopens once.
bool ProcScanner::read_kept(common::Fd& fd, int pid, const char* name, std::string& out,
                            bool& reopened) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!fd) {
      reopened = true;
      char path[PATH_MAX];
      fmt::format_to_n(path, sizeof path - 1, "{}/{}/{}", root_, pid, name).out[0] = '\0';
      if (out_of_fds_) return read_proc_file(path, out, 4096);
      fd.reset(::open(path, O_RDONLY | O_CLOEXEC));
      if (!fd) {
        if (errno == EMFILE || errno == ENFILE) {
          out_of_fds_ = true;
          return read_proc_file(path, out, 4096);
        }
        return false;
      }
    }
    char buf[1024];
    const ssize_t n = ::pread(fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      out.assign(buf, static_cast<std::size_t>(n));
      return true;
    }
    fd.reset();
  }
  return false;
}

// The last field of loadavg: the pid most recently allocated in this pid
// namespace. nullopt when unreadable (fake trees have none).
std::optional<std::int64_t> ProcScanner::last_pid() {
  if (!loadavg_fd_) {
    loadavg_fd_.reset(::open((root_ + "/loadavg").c_str(), O_RDONLY | O_CLOEXEC));
    if (!loadavg_fd_) return std::nullopt;
  }
  char buf[128];
  const ssize_t n = ::pread(loadavg_fd_.get(), buf, sizeof buf, 0);
  if (n <= 0) return std::nullopt;
  return parse_loadavg_last_pid(std::string_view(buf, static_cast<std::size_t>(n)));
}

bool ProcScanner::observe(int pid, Files& f, std::vector<ProcessObservation>& out,
                          std::int64_t page_bytes) {
  // schedstat is read before stat: the stat read then reflects everything
  // the process did up to that schedstat value, and any later run moves it.
  std::optional<Schedstat> schedstat;
  bool schedstat_first = false, reopened = false;
  if (!f.stat || f.stat->threads <= 1) {
    if (read_kept(f.schedstat_fd, pid, "schedstat", buf_, reopened)) {
      schedstat = parse_schedstat(buf_);
    }
    schedstat_first = true;
  }
  // A sleeping single-threaded process whose schedstat has not moved has not
  // run since its last stat read: reuse that read.
  const bool from_cache = f.stat && f.schedstat && schedstat && !reopened && !out_of_fds_ &&
                          f.stat->threads <= 1 && (f.stat->state == 'S' || f.stat->state == 'I') &&
                          schedstat->on_cpu_ns == f.schedstat->on_cpu_ns &&
                          schedstat->run_delay_ns == f.schedstat->run_delay_ns &&
                          schedstat->timeslices == f.schedstat->timeslices;
  if (!from_cache) {
    f.schedstat.reset();
    bool stat_reopened = false;
    if (!read_kept(f.stat_fd, pid, "stat", buf_, stat_reopened)) {
      f.stat.reset();
      return false;
    }
    f.stat = parse_pid_stat(buf_);
    if (!f.stat) return false;
    if (f.stat->threads > 1) {
      schedstat.reset();  // the main thread's alone: the tracker sums task/*
    } else if (schedstat_first) {
      // A stat read through a fallback path (no kept file) is not cached: a
      // reused pid could not be told apart.
      if (!out_of_fds_) f.schedstat = schedstat;
    } else {  // it was multi-threaded: read after stat, so not a cache base
      bool unused = false;
      schedstat.reset();
      if (read_kept(f.schedstat_fd, pid, "schedstat", buf_, unused)) {
        schedstat = parse_schedstat(buf_);
      }
    }
  }
  const PidStat& st = *f.stat;
  ProcessObservation& obs = out.emplace_back();
  obs.pid = pid;
  obs.start_ticks = st.start_ticks;
  obs.ppid = st.ppid;
  obs.state = st.state;
  obs.exiting = is_exiting(st);
  obs.comm = st.comm;
  obs.utime_ticks = st.utime_ticks;
  obs.stime_ticks = st.stime_ticks;
  obs.majflt = st.majflt;
  obs.rss_bytes = rss_bytes(st.rss_pages, page_bytes);
  obs.threads = st.threads;
  obs.blkio_ticks = st.blkio_ticks;
  obs.schedstat = schedstat;
  obs.stat_cached = from_cache;
  return true;
}

bool ProcScanner::scan(std::vector<ProcessObservation>& out, std::int64_t page_bytes) {
  out.clear();
  ++generation_;
  const std::optional<std::int64_t> pid_cursor = last_pid();
  const bool list =
      !pid_cursor || !listed_last_pid_ || *pid_cursor != *listed_last_pid_ || out_of_fds_;
  if (list) {
    // readdir, not std::filesystem: no path object per entry at ~1,000 a tick.
    common::Dir dir(::opendir(root_.c_str()));
    if (!dir) {
      listed_last_pid_.reset();
      return false;
    }
    ++listings_;
    listed_last_pid_ = pid_cursor;
    while (const dirent* entry = dir.read()) {
      // Only the numeric entries are processes ("self", "sys", "." are not).
      const std::optional<int> pid = common::parse_int(entry->d_name);
      if (!pid || *pid <= 0) continue;
      Files& f = files_[*pid];
      f.generation = generation_;
      observe(*pid, f, out, page_bytes);
    }
  } else {
    // No pid allocated since the last listing: the processes are those
    // already known, minus those that exited (their reads fail).
    for (auto& [pid, f] : files_) {
      if (observe(pid, f, out, page_bytes)) f.generation = generation_;
    }
  }
  // Erasing a process's Files closes its descriptors.
  std::erase_if(files_, [&](const auto& e) { return e.second.generation != generation_; });
  // A later tick may find descriptors again (processes exited).
  out_of_fds_ = false;
  return true;
}

std::optional<std::uint64_t> raise_nofile_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return std::nullopt;
  const std::uint64_t before = lim.rlim_cur;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  return before;
}

void CgroupThrottleTracker::observe(std::int64_t sample_id, std::int64_t mono_ns,
                                    const std::vector<CgroupRef>& cgroups, schema::Batch& out) {
  for (const CgroupRef& ref : cgroups) {
    auto now = read_cpu_throttle(root_, ref);
    if (!now) continue;
    const std::string key = (ref.v1 ? "1:" : "2:") + ref.path;
    schema::CgroupSampleRow row{.sample_id = sample_id, .cgroup = ref.path};
    auto it = state_.find(key);
    if (it != state_.end()) {
      const CpuThrottle& b = it->second.counters;
      auto d = [](std::optional<std::int64_t> n,
                  std::optional<std::int64_t> o) -> std::optional<std::int64_t> {
        if (!n || !o || *n < *o) return std::nullopt;
        return *n - *o;
      };
      row.nr_periods = d(now->nr_periods, b.nr_periods);
      row.nr_throttled = d(now->nr_throttled, b.nr_throttled);
      row.throttled_ns = d(now->throttled_ns, b.throttled_ns);
      row.span_ns = mono_ns - it->second.mono_ns;
    }
    state_[key] = State{.mono_ns = mono_ns, .counters = *now};
    out.cgroup_samples.push_back(std::move(row));
  }
  std::erase_if(state_,
                [&](const auto& e) { return mono_ns - e.second.mono_ns > 60 * common::kNsPerS; });
}

}  // namespace stallscope::sampler::detail
