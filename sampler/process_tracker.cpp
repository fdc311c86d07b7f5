// ProcessTracker (sampler/procfs.h): which processes and threads get a row
// each tick, and their deltas.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "common/conninfo.h"
#include "common/fd.h"
#include "common/parse.h"
#include "common/units.h"
#include "sampler/procfs.h"

namespace stallscope::sampler::detail {

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

ProcessTracker::ProcessTracker(std::string proc_root, std::int64_t heartbeat_ns, TrackerDepth depth)
    : proc_root_(std::move(proc_root)),
      heartbeat_ns_(heartbeat_ns),
      depth_(std::move(depth)),
      poll_reader_(proc_root_) {}

bool ProcessTracker::watch(const ProcessObservation& obs) {
  if (!depth_.client_watch) return false;
  const bool watched =
      watched_pids_.contains(obs.pid) ||
      (obs.ppid && (watched_pids_.contains(*obs.ppid) || next_watched_pids_.contains(*obs.ppid))) ||
      watch_.watches(obs.pid, obs.comm);
  if (watched) next_watched_pids_.insert(obs.pid);
  return watched;
}

void ProcessTracker::read_tasks(int pid) {
  tasks_.clear();
  const std::string task_dir = fmt::format("{}/{}/task", proc_root_, pid);
  common::Dir dir(::opendir(task_dir.c_str()));
  if (!dir) return;
  std::string path;
  while (const dirent* entry = dir.read()) {
    const std::string_view name = entry->d_name;
    const std::optional<int> tid = common::parse_int(name);
    if (!tid || *tid <= 0) continue;
    path.assign(task_dir).append("/").append(name).append("/stat");
    if (!read_proc_file(path, text_, 4096)) continue;
    auto st = parse_task_stat(text_);
    if (!st) continue;
    TaskReading& r = tasks_.emplace_back();
    r.tid = *tid;
    r.stat = std::move(*st);
    path.append("sched").replace(path.size() - 9, 9, "schedstat");
    if (read_proc_file(path, text_, 256)) r.schedstat = parse_schedstat(text_);
  }
}

void ProcessTracker::sample_threads(const TickInfo& tick, int pid, Tracked& t, bool watched,
                                    schema::Batch& out) {
  for (const TaskReading& task : tasks_) {
    const int tid = task.tid;
    const TaskStat* st = &task.stat;
    const std::optional<Schedstat>& ss = task.schedstat;
    auto [th_it, is_new] = t.threads.try_emplace(ThreadKey{tid, st->start_ticks});
    ThreadState& th = th_it->second;
    th.generation = generation_;
    const bool busy = st->state == 'R' || st->state == 'D';
    bool row = busy;
    if (!is_new && !row) {
      row = ss && th.last &&
            (ss->on_cpu_ns != th.last->on_cpu_ns || ss->timeslices != th.last->timeslices);
    }
    th.last = ss;
    if (is_new) {  // first sight: the baseline of its first delta, row or not
      th.base = ss;
      th.base_mono_ns = tick.mono_ns;
    }
    if (!row) continue;
    schema::ThreadSampleRow r{.sample_id = tick.sample_id,
                              .process_id = t.process_id,
                              .tid = tid,
                              .comm = st->comm,
                              .state = st->state};
    if (!is_new) {
      if (ss && th.base && ss->on_cpu_ns >= th.base->on_cpu_ns &&
          ss->run_delay_ns >= th.base->run_delay_ns) {
        r.cpu_ns = ss->on_cpu_ns - th.base->on_cpu_ns;
        r.run_delay_ns = ss->run_delay_ns - th.base->run_delay_ns;
      }
      r.span_ns = tick.mono_ns - th.base_mono_ns;
    }
    const std::string dir = fmt::format("{}/{}/task/{}", proc_root_, pid, tid);
    if (st->state != 'R') {
      if (read_proc_file(dir + "/wchan", text_, 256)) r.wchan = parse_wchan(text_);
    }
    if (st->state == 'D' && depth_.kernel_stacks)
      r.kernel_stack = read_kernel_stack(dir + "/stack");
    // A record client's thread asleep: what it waits on, as for the process.
    if (watched && st->state == 'S')
      r.poll_wait = poll_reader_.read(pid, watch_.database_ports, tid);
    th.base = ss;
    th.base_mono_ns = tick.mono_ns;
    out.thread_samples.push_back(std::move(r));
  }
  std::erase_if(t.threads, [&](const auto& e) { return e.second.generation != generation_; });
}

namespace {

// The sum of the threads' schedstat, as read_schedstat_all_threads.
template <typename Tasks>
std::optional<Schedstat> sum_schedstat(const Tasks& tasks) {
  std::optional<Schedstat> sum;
  for (const auto& task : tasks) {
    if (!task.schedstat) continue;
    if (!sum) sum = Schedstat{};
    sum->on_cpu_ns += task.schedstat->on_cpu_ns;
    sum->run_delay_ns += task.schedstat->run_delay_ns;
    sum->timeslices += task.schedstat->timeslices;
  }
  return sum;
}

// An observation whose stat was cached by the scanner, with stat read again
// (same process: same start time); `listed` itself when that fails.
const ProcessObservation& refresh_stat(const ProcessObservation& listed, const std::string& root,
                                       std::int64_t page_bytes, std::string& text,
                                       ProcessObservation& fresh) {
  if (!read_proc_file(pid_path(root, listed.pid, "stat"), text, 4096)) return listed;
  auto st = parse_pid_stat(text);
  if (!st || st->start_ticks != listed.start_ticks) return listed;
  fresh = listed;
  fresh.stat_cached = false;
  fresh.ppid = st->ppid;
  fresh.state = st->state;
  fresh.exiting = is_exiting(*st);
  fresh.comm = std::move(st->comm);
  fresh.utime_ticks = st->utime_ticks;
  fresh.stime_ticks = st->stime_ticks;
  fresh.majflt = st->majflt;
  fresh.rss_bytes = rss_bytes(st->rss_pages, page_bytes);
  fresh.threads = st->threads;
  fresh.blkio_ticks = st->blkio_ticks;
  return fresh;
}

}  // namespace

void ProcessTracker::observe(const TickInfo& tick,
                             const std::vector<ProcessObservation>& observations,
                             schema::Batch& out) {
  ++generation_;
  active_cgroups_.clear();
  poll_reader_.new_tick();
  next_watched_pids_.clear();
  if (depth_.client_watch) depth_.client_watch->refresh(watch_);
  const std::size_t first_process_sample = out.process_samples.size();
  const std::size_t first_thread_sample = out.thread_samples.size();
  for (const ProcessObservation& listed : observations) {
    const ProcessObservation& obs = listed;  // until a row needs stat re-read
    const Key key{obs.pid, obs.start_ticks};
    auto [it, is_new] = tracked_.try_emplace(key);
    Tracked& t = it->second;
    if (!is_new && t.generation == generation_) continue;  // listed twice in one tick
    t.generation = generation_;
    const bool watched = watch(obs);
    auto wants_threads = [&] {
      if (obs.threads <= 1 || obs.pid == depth_.never_threads_pid) return false;
      // A record's client process: its threads' waits split the client's side.
      return depth_.all_threads || t.recent_cores >= depth_.thread_cores_min ||
             obs.pid == depth_.always_threads_pid || watched;
    };
    // A process sampled per thread: its task files are read once, for the
    // schedstat sum and the thread rows.
    bool have_tasks = false;
    if (!obs.schedstat && wants_threads()) {
      read_tasks(obs.pid);
      have_tasks = true;
    }
    auto schedstat = obs.schedstat     ? obs.schedstat
                     : have_tasks      ? sum_schedstat(tasks_)
                     : obs.threads > 1 ? read_schedstat_all_threads(proc_root_, obs.pid)
                                       : read_schedstat(proc_root_, obs.pid);

    bool row = is_new;
    // A heartbeat row of a task that has not run since its last row: its
    // status, io and wchan cannot have changed, so they are not read again
    // (the deep files are read only for tasks that did something).
    bool quiet = false;
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
      const bool active = cpu_moved || obs.state == 'R' || obs.state == 'D';
      row = active || tick.mono_ns - t.base.mono_ns >= heartbeat_ns_;
      quiet = !active && schedstat && t.last_schedstat;
      // Held up in the kernel since its last row (a full pipe, a socket
      // send buffer…): a row every tick, so that a sleep of seconds is seen
      // at each one. It has not run, so it still sleeps where its last row
      // saw it.
      const bool kernel_thread = obs.pid == 2 || obs.ppid == 2;
      if (quiet && obs.state == 'S' && !kernel_thread && t.held_in_kernel) {
        row = true;
      }
    }
    const bool exec_seen = !is_new && obs.comm != t.comm;
    row = row || exec_seen;
    quiet = quiet && !exec_seen;
    t.last_schedstat = schedstat;
    t.last_utime_ticks = obs.utime_ticks;
    t.last_stime_ticks = obs.stime_ticks;

    // CPU rate over about the last second: picks the processes sampled per thread.
    if (schedstat) {
      if (t.window_cpu_ns < 0 || schedstat->on_cpu_ns < t.window_cpu_ns) {
        t.window_mono_ns = tick.mono_ns;
        t.window_cpu_ns = schedstat->on_cpu_ns;
      } else if (tick.mono_ns - t.window_mono_ns >= common::kNsPerS) {
        t.recent_cores = static_cast<double>(schedstat->on_cpu_ns - t.window_cpu_ns) /
                         static_cast<double>(tick.mono_ns - t.window_mono_ns);
        t.window_mono_ns = tick.mono_ns;
        t.window_cpu_ns = schedstat->on_cpu_ns;
      }
    }
    const bool per_thread = wants_threads();
    if (!per_thread) t.threads.clear();
    if (per_thread && !have_tasks) {  // it just reached the threshold
      read_tasks(obs.pid);
      have_tasks = true;
    }
    if (!row) {
      // A thread can sit in D without moving the process's counters: with
      // --threads, look at the threads of quiet processes too.
      if (per_thread && depth_.all_threads) sample_threads(tick, obs.pid, t, watched, out);
      continue;
    }
    sample_row(tick, listed, is_new, exec_seen, quiet, watched, schedstat, t, out);
    if (per_thread) sample_threads(tick, obs.pid, t, watched, out);
  }
  std::erase_if(tracked_,
                [&](const auto& entry) { return entry.second.generation != generation_; });
  std::swap(watched_pids_, next_watched_pids_);
  // Rows in key order: the writer then appends to the end of each
  // WITHOUT ROWID table, which leaves its pages full instead of split half
  // empty.
  std::sort(out.process_samples.begin() + static_cast<std::ptrdiff_t>(first_process_sample),
            out.process_samples.end(),
            [](const auto& a, const auto& b) { return a.process_id < b.process_id; });
  std::sort(out.thread_samples.begin() + static_cast<std::ptrdiff_t>(first_thread_sample),
            out.thread_samples.end(), [](const auto& a, const auto& b) {
              return std::tie(a.process_id, a.tid) < std::tie(b.process_id, b.tid);
            });
}

bool ProcessTracker::exited_since(const ProcessObservation& obs) {
  if (!read_proc_file(pid_path(proc_root_, obs.pid, "stat"), text_, 4096)) return true;
  const auto st = parse_pid_stat(text_);
  return !st || st->start_ticks != obs.start_ticks || is_exiting(*st);
}

void ProcessTracker::sample_row(const TickInfo& tick, const ProcessObservation& listed, bool is_new,
                                bool exec_seen, bool quiet, bool watched,
                                const std::optional<Schedstat>& schedstat, Tracked& t,
                                schema::Batch& out) {
  // A sleeping process the scanner did not re-read: read its stat now.
  ProcessObservation fresh;
  const ProcessObservation& obs =
      listed.stat_cached ? refresh_stat(listed, proc_root_, tick.page_bytes, text_, fresh) : listed;
  quiet = quiet && obs.state == listed.state;

  std::optional<std::int64_t> on_cpu_ns, run_delay_ns;
  if (schedstat) {
    on_cpu_ns = schedstat->on_cpu_ns;
    run_delay_ns = schedstat->run_delay_ns;
  }
  auto switches = quiet ? t.base.context_switches : read_context_switches(proc_root_, obs.pid);
  auto io = quiet ? t.base.io : read_io(proc_root_, obs.pid);
  auto cgroup = quiet || obs.exiting ? std::nullopt : read_cgroup(proc_root_, obs.pid);
  if (!is_new && cgroup && cgroup->path != t.cgroup && exited_since(obs)) cgroup.reset();
  std::optional<std::int64_t> blkio_ticks;
  if (tick.delayacct_on) blkio_ticks = obs.blkio_ticks;
  const bool cgroup_changed = !is_new && cgroup && cgroup->path != t.cgroup;
  if (cgroup) {
    bool seen = false;
    for (const auto& c : active_cgroups_)
      seen = seen || (c.path == cgroup->path && c.v1 == cgroup->v1);
    if (!seen) active_cgroups_.push_back(*cgroup);
  }

  schema::ProcessSampleRow sample{
      .sample_id = tick.sample_id,
      .state = obs.state,
      .rss_bytes = obs.rss_bytes,
  };
  if (quiet) {
    sample.wchan = t.last_wchan;
    sample.poll_wait = t.last_poll_wait;
  } else {
    if (obs.state != 'R') sample.wchan = read_wchan(proc_root_, obs.pid);
    t.held_in_kernel = sample.wchan && !is_idle_wchan(*sample.wchan);
    // What a watched client asleep in a call on fds waits on (any wait
    // channel: a blocking read sleeps in sk_wait_data, wait_woken, …).
    if (watched && obs.state == 'S')
      sample.poll_wait = poll_reader_.read(obs.pid, watch_.database_ports);
  }
  t.last_wchan = sample.wchan;
  t.last_poll_wait = sample.poll_wait;
  if (obs.state == 'D' && depth_.kernel_stacks) {
    sample.kernel_stack = read_kernel_stack(pid_path(proc_root_, obs.pid, "stack"));
  }

  if (is_new) {
    t.process_id = next_process_id_++;
    t.first_sample_id = tick.sample_id;
  }
  if (is_new || exec_seen || cgroup_changed) {
    t.comm = obs.comm;
    if (cgroup) t.cgroup = cgroup->path;
    schema::ProcessRow process{
        .process_id = t.process_id,
        .pid = obs.pid,
        .start_ticks = obs.start_ticks,
        .ppid = obs.ppid,
        .comm = obs.comm,
        .first_sample_id = t.first_sample_id,
        .cgroup = t.cgroup,
    };
    if (tick.ticks_per_s > 0) {
      // Split so that ticks × kNsPerS cannot overflow after years of uptime.
      const std::int64_t hz = tick.ticks_per_s;
      process.start_ns = tick.boot_wall_ns + obs.start_ticks / hz * common::kNsPerS +
                         obs.start_ticks % hz * common::kNsPerS / hz;
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
    if (io && b.io) {
      sample.read_bytes = delta(io->read_bytes, b.io->read_bytes);
      sample.write_bytes = delta(io->write_bytes, b.io->write_bytes);
    }
    if (auto d = delta(blkio_ticks, b.blkio_ticks); d && tick.ticks_per_s > 0) {
      sample.blkio_delay_ns = *d * common::kNsPerS / tick.ticks_per_s;
    }
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
      .io = io,
      .blkio_ticks = blkio_ticks,
  };
}

}  // namespace stallscope::sampler::detail
