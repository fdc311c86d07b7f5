#include "sampler/procfs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>

#include <fmt/format.h>

#include "common/conninfo.h"

namespace stallscope::sampler::detail {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n';
}

std::string_view skip_spaces(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

// Parses a non-negative integer at the start of `s` (after blanks) and
// removes it from `s`; the number must end at a blank or the end.
std::optional<std::int64_t> take_count(std::string_view& s) {
  s = skip_spaces(s);
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || value < 0) return std::nullopt;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  if (!s.empty() && !is_space(s.front())) return std::nullopt;
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

std::string pid_path(const std::string& proc_root, int pid, std::string_view file) {
  return fmt::format("{}/{}/{}", proc_root, pid, file);
}

}  // namespace

bool read_proc_file(const std::string& path, std::string& out, std::size_t max_bytes) {
  out.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = true;
  char buf[4096];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;  // e.g. ESRCH: the process exited between open and read
      break;
    }
    if (n == 0) break;
    out.append(buf, std::min(static_cast<std::size_t>(n), max_bytes - out.size()));
  }
  ::close(fd);
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

std::optional<std::string> read_wchan(const std::string& proc_root, int pid) {
  std::string text;
  if (!read_proc_file(pid_path(proc_root, pid, "wchan"), text, 256)) return std::nullopt;
  while (!text.empty() && is_space(text.back())) text.pop_back();
  if (text.empty() || text == "0" || text == "-" || text == "?") return std::nullopt;
  return text;
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
  if (!read_proc_file(pid_path(proc_root, pid, "cmdline"), text, 256 * 1024)) {
    return std::nullopt;
  }
  auto args = split_cmdline(text);
  if (args.empty()) return std::nullopt;
  return args;
}

// ---------------------------------------------------------------------------

namespace {

std::optional<std::int64_t> delta(std::optional<std::int64_t> now,
                                  std::optional<std::int64_t> before) {
  if (!now || !before || *now < *before) return std::nullopt;
  return *now - *before;
}

std::optional<std::int64_t> delta(std::int64_t now, std::int64_t before) {
  if (now < before) return std::nullopt;
  return now - before;
}

}  // namespace

ProcessTracker::ProcessTracker(std::string proc_root, std::int64_t heartbeat_ns)
    : proc_root_(std::move(proc_root)), heartbeat_ns_(heartbeat_ns) {}

void ProcessTracker::observe(const TickInfo& tick,
                             const std::vector<ProcessObservation>& observations,
                             schema::Batch& out) {
  ++generation_;
  for (const ProcessObservation& obs : observations) {
    const Key key{obs.pid, obs.start_ticks};
    auto schedstat = obs.threads > 1 ? read_schedstat_all_threads(proc_root_, obs.pid)
                                     : read_schedstat(proc_root_, obs.pid);
    auto [it, is_new] = tracked_.try_emplace(key);
    Tracked& t = it->second;
    if (!is_new && t.generation == generation_) continue;  // listed twice in one tick
    t.generation = generation_;

    bool row = is_new;
    if (!is_new) {
      bool cpu_moved;
      if (schedstat && t.last_schedstat) {
        cpu_moved = schedstat->on_cpu_ns != t.last_schedstat->on_cpu_ns ||
                    schedstat->timeslices != t.last_schedstat->timeslices;
      } else {
        // Without schedstat we cannot tell a context switch cheaply: fall
        // back to the (10 ms) tick counters.
        cpu_moved = obs.utime_ticks != t.last_utime_ticks || obs.stime_ticks != t.last_stime_ticks;
      }
      row = cpu_moved || obs.state == 'R' || obs.state == 'D' ||
            tick.mono_ns - t.base.mono_ns >= heartbeat_ns_;
    }
    const bool exec_seen = !is_new && obs.comm != t.comm;
    row = row || exec_seen;
    t.last_schedstat = schedstat;
    t.last_utime_ticks = obs.utime_ticks;
    t.last_stime_ticks = obs.stime_ticks;
    if (!row) continue;

    std::optional<std::int64_t> on_cpu_ns, run_delay_ns;
    if (schedstat) {
      on_cpu_ns = schedstat->on_cpu_ns;
      run_delay_ns = schedstat->run_delay_ns;
    }
    auto switches = read_context_switches(proc_root_, obs.pid);

    schema::ProcessSampleRow sample{
        .sample_id = tick.sample_id,
        .state = obs.state,
        .rss_bytes = obs.rss_bytes,
    };
    if (obs.state != 'R') sample.wchan = read_wchan(proc_root_, obs.pid);

    if (is_new) {
      t.process_id = next_process_id_++;
      t.first_sample_id = tick.sample_id;
    }
    if (is_new || exec_seen) {
      t.comm = obs.comm;
      schema::ProcessRow process{
          .process_id = t.process_id,
          .pid = obs.pid,
          .start_ticks = obs.start_ticks,
          .ppid = obs.ppid,
          .comm = obs.comm,
          .first_sample_id = t.first_sample_id,
      };
      if (tick.ticks_per_s > 0) {
        // Split so that ticks × 1e9 cannot overflow after years of uptime.
        const std::int64_t hz = tick.ticks_per_s;
        process.start_ns = tick.boot_wall_ns + obs.start_ticks / hz * 1'000'000'000 +
                           obs.start_ticks % hz * 1'000'000'000 / hz;
      }
      if (auto args = read_cmdline(proc_root_, obs.pid)) {
        process.cmdline = join_args_masked(*args);
      }
      out.processes.push_back(std::move(process));
    }
    if (!is_new) {
      const Baseline& b = t.base;
      sample.cpu_ns = delta(on_cpu_ns, b.on_cpu_ns);
      sample.run_delay_ns = delta(run_delay_ns, b.run_delay_ns);
      sample.utime_ticks = delta(obs.utime_ticks, b.utime_ticks);
      sample.stime_ticks = delta(obs.stime_ticks, b.stime_ticks);
      sample.majflt = delta(obs.majflt, b.majflt);
      if (switches && b.context_switches) {
        sample.voluntary_ctxt_switches = delta(switches->voluntary, b.context_switches->voluntary);
        sample.nonvoluntary_ctxt_switches =
            delta(switches->nonvoluntary, b.context_switches->nonvoluntary);
      }
      sample.span_ns = tick.mono_ns - b.mono_ns;
    }
    sample.process_id = t.process_id;
    out.process_samples.push_back(std::move(sample));

    t.base = Baseline{
        .mono_ns = tick.mono_ns,
        .on_cpu_ns = on_cpu_ns,
        .run_delay_ns = run_delay_ns,
        .utime_ticks = obs.utime_ticks,
        .stime_ticks = obs.stime_ticks,
        .majflt = obs.majflt,
        .context_switches = switches,
    };
  }
  std::erase_if(tracked_,
                [&](const auto& entry) { return entry.second.generation != generation_; });
}

}  // namespace stallscope::sampler::detail
