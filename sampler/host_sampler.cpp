// HostSampler: one tick every 1/hz s on its own thread.
//
// Per tick: /proc/stat (libproc2 stat select), loadavg, one broad libproc2
// reap of cheap items (all from /proc/PID/stat), then detail::ProcessTracker
// reads schedstat for every process and status / wchan / cmdline only for the
// processes that get a row. libproc2 reads the real /proc; proc_root applies
// to the hand-read files.
#include <libproc2/misc.h>
#include <libproc2/pids.h>
#include <libproc2/stat.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "sampler/procfs.h"
#include "sampler/sampler.h"

namespace stallscope::sampler {
namespace {

using PidsHandle = detail::Proc2Handle<pids_info, procps_pids_unref>;
using StatHandle = detail::Proc2Handle<stat_info, procps_stat_unref>;

// The broad reap: items that libproc2 fills from /proc/PID/stat alone.
// Deltas are not asked of libproc2 (its history ignores start time); the
// tracker keeps its own, keyed by (pid, start_ticks).
enum PidsColumn : int {
  kPid,
  kPpid,
  kState,
  kUtime,
  kStime,
  kBegan,
  kRssPages,
  kMajflt,
  kComm,
  kThreads,
  kPidsColumns
};
constexpr std::array<pids_item, kPidsColumns> kPidsItems{
    PIDS_ID_PID,     PIDS_ID_PPID, PIDS_STATE,   PIDS_TICS_USER, PIDS_TICS_SYSTEM,
    PIDS_TICS_BEGAN, PIDS_RSS,     PIDS_FLT_MAJ, PIDS_CMD,       PIDS_NLWP};

enum StatColumn : int {
  kUser,
  kNice,
  kSystem,
  kIdle,
  kIowait,
  kIrq,
  kSoftirq,
  kSteal,
  kProcsRunning,
  kProcsBlocked,
  kStatColumns
};
constexpr int kCpuModes = kSteal + 1;  // guest ticks are already in user/nice: not summed
constexpr std::array<stat_item, kStatColumns> kStatItems{
    STAT_TIC_USER, STAT_TIC_NICE,    STAT_TIC_SYSTEM, STAT_TIC_IDLE,         STAT_TIC_IOWAIT,
    STAT_TIC_IRQ,  STAT_TIC_SOFTIRQ, STAT_TIC_STOLEN, STAT_SYS_PROC_RUNNING, STAT_SYS_PROC_BLOCKED};

// The one place that spells libproc2's result macros: they take 4 arguments
// in 4.0.2 and 3 from 4.0.5.
struct PidsRow {
  pids_stack* stack;
  int s_int(int col) const { return PIDS_VAL(col, s_int, stack, nullptr); }
  char s_ch(int col) const { return static_cast<char>(PIDS_VAL(col, s_ch, stack, nullptr)); }
  unsigned long ul_int(int col) const { return PIDS_VAL(col, ul_int, stack, nullptr); }
  unsigned long long ull_int(int col) const { return PIDS_VAL(col, ull_int, stack, nullptr); }
  const char* str(int col) const { return PIDS_VAL(col, str, stack, nullptr); }
};
struct StatRow {
  stat_stack* stack;
  unsigned long long ull_int(int col) const { return STAT_VAL(col, ull_int, stack, nullptr); }
  unsigned long ul_int(int col) const { return STAT_VAL(col, ul_int, stack, nullptr); }
};

std::int64_t boottime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::chrono::steady_clock::time_point steady_at(std::int64_t mono_ns) {
  // libstdc++'s steady_clock is CLOCK_MONOTONIC, the clock of mono_now_ns().
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(mono_ns));
}

}  // namespace

struct HostSampler::Impl {
  HostSamplerOptions options;
  Sink sink;

  // Owned by the sampling thread once it runs.
  PidsHandle pids;
  StatHandle stat;
  std::array<pids_item, kPidsColumns> pids_items = kPidsItems;
  std::array<stat_item, kStatColumns> stat_items = kStatItems;
  long ticks_per_s = 100;
  std::int64_t page_bytes = 4096;
  std::int64_t boot_wall_ns = 0;
  detail::ProcessTracker tracker;
  std::vector<detail::ProcessObservation> observations;
  std::int64_t sample_id = 0;
  std::optional<std::int64_t> prev_mono_ns;
  std::optional<std::array<std::int64_t, kCpuModes>> prev_cpu_ticks;

  // Shared with other threads.
  mutable std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  HostSnapshot snapshot;
  std::thread thread;

  Impl(HostSamplerOptions o, Sink s)
      : options(std::move(o)),
        sink(std::move(s)),
        tracker(options.proc_root, options.heartbeat_ns) {}

  void run();
  schema::Batch tick(std::int64_t mono_ns, std::int64_t wall_ns);
  void sample_host(schema::HostSampleRow& host, HostSnapshot& snap);
  void sample_processes(schema::HostSampleRow& host, schema::Batch& batch, std::int64_t mono_ns);
};

void HostSampler::Impl::run() {
  const std::int64_t period_ns =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(1e9 / options.hz));
  const std::int64_t start_ns = mono_now_ns();
  std::int64_t deadline_ns = start_ns;
  for (;;) {
    const std::int64_t wall_ns = wall_now_ns();
    const std::int64_t mono_ns = mono_now_ns();
    try {
      schema::Batch batch = tick(mono_ns, wall_ns);
      if (sink) sink(std::move(batch));
    } catch (...) {
      // Only a throwing sink (or out of memory) gets here; no thread may
      // leak an exception, so sampling ends and stop() still joins.
      return;
    }

    deadline_ns += period_ns;
    const std::int64_t now_ns = mono_now_ns();
    if (now_ns >= deadline_ns) {  // overran: skip to the next deadline still ahead
      deadline_ns += (now_ns - deadline_ns) / period_ns * period_ns + period_ns;
    }
    std::unique_lock lock(mu);
    if (cv.wait_until(lock, steady_at(deadline_ns), [&] { return stopping; })) return;
  }
}

schema::Batch HostSampler::Impl::tick(std::int64_t mono_ns, std::int64_t wall_ns) {
  const std::int64_t cpu_begin_ns = thread_cpu_ns();
  schema::Batch batch;
  ++sample_id;
  schema::HostSampleRow host{.sample_id = sample_id};
  HostSnapshot snap{.ticks = sample_id};
  sample_host(host, snap);
  sample_processes(host, batch, mono_ns);
  snap.processes_d_state = host.processes_d_state;
  if (snap.ticks > 1) snap.time_ns = wall_ns;

  schema::SampleRow sample{
      .sample_id = sample_id,
      .time_ns = wall_ns,
      .mono_ns = mono_ns,
  };
  if (prev_mono_ns) sample.interval_ns = mono_ns - *prev_mono_ns;
  prev_mono_ns = mono_ns;
  sample.sampler_duration_ns = mono_now_ns() - mono_ns;
  sample.sampler_cpu_ns = thread_cpu_ns() - cpu_begin_ns;
  batch.samples.push_back(sample);
  batch.host_samples.push_back(host);
  {
    std::lock_guard lock(mu);
    snapshot = snap;
  }
  return batch;
}

void HostSampler::Impl::sample_host(schema::HostSampleRow& host, HostSnapshot& snap) {
  double av1 = 0, av5 = 0, av15 = 0;
  if (procps_loadavg(&av1, &av5, &av15) >= 0) {
    host.load1 = av1;
    host.load5 = av5;
    host.load15 = av15;
  }
  stat_stack* stack = procps_stat_select(stat.get(), stat_items.data(), kStatColumns);
  if (!stack) {  // /proc/stat unreadable this tick: CPU columns stay NULL
    prev_cpu_ticks.reset();
    return;
  }
  const StatRow row{stack};
  host.procs_running = static_cast<int>(row.ul_int(kProcsRunning));
  host.procs_blocked = static_cast<int>(row.ul_int(kProcsBlocked));
  std::array<std::int64_t, kCpuModes> ticks{};
  for (int i = 0; i < kCpuModes; ++i) ticks[i] = static_cast<std::int64_t>(row.ull_int(i));
  if (prev_cpu_ticks) {
    std::array<std::optional<std::int64_t>, kCpuModes> ns;
    std::int64_t total_ticks = 0;
    for (int i = 0; i < kCpuModes; ++i) {
      const std::int64_t d = ticks[i] - (*prev_cpu_ticks)[i];
      if (d < 0) continue;  // iowait can go backwards: no value, not 0
      ns[i] = d * 1'000'000'000 / ticks_per_s;
      total_ticks += d;
    }
    host.cpu_user_ns = ns[kUser];
    host.cpu_nice_ns = ns[kNice];
    host.cpu_system_ns = ns[kSystem];
    host.cpu_idle_ns = ns[kIdle];
    host.cpu_iowait_ns = ns[kIowait];
    host.cpu_irq_ns = ns[kIrq];
    host.cpu_softirq_ns = ns[kSoftirq];
    host.cpu_steal_ns = ns[kSteal];
    if (total_ticks > 0) {
      auto pct = [&](int i) {
        const std::int64_t d = ticks[i] - (*prev_cpu_ticks)[i];
        return d > 0 ? 100.0 * static_cast<double>(d) / static_cast<double>(total_ticks) : 0.0;
      };
      snap.idle_pct = pct(kIdle);
      snap.iowait_pct = pct(kIowait);
      snap.steal_pct = pct(kSteal);
    }
  }
  prev_cpu_ticks = ticks;
}

void HostSampler::Impl::sample_processes(schema::HostSampleRow& host, schema::Batch& batch,
                                         std::int64_t mono_ns) {
  observations.clear();
  if (pids_fetch* fetch = procps_pids_reap(pids.get(), PIDS_FETCH_TASKS_ONLY)) {
    const int total = fetch->counts ? fetch->counts->total : 0;
    for (int i = 0; i < total && fetch->stacks[i]; ++i) {
      const PidsRow row{fetch->stacks[i]};
      detail::ProcessObservation& obs = observations.emplace_back();
      obs.pid = row.s_int(kPid);
      obs.start_ticks = static_cast<std::int64_t>(row.ull_int(kBegan));
      obs.ppid = row.s_int(kPpid);
      obs.state = row.s_ch(kState);
      const char* comm = row.str(kComm);
      obs.comm = comm ? comm : "";  // copied: libproc2 reuses its strings
      obs.utime_ticks = static_cast<std::int64_t>(row.ull_int(kUtime));
      obs.stime_ticks = static_cast<std::int64_t>(row.ull_int(kStime));
      obs.majflt = static_cast<std::int64_t>(row.ul_int(kMajflt));
      obs.rss_bytes = static_cast<std::int64_t>(row.ul_int(kRssPages)) * page_bytes;
      obs.threads = row.s_int(kThreads);
      if (obs.state == 'D') ++host.processes_d_state;
    }
  }
  // A failed reap (out of memory) leaves the list empty: the tick still has
  // its system figures, and the tracker forgets nothing it cannot compare.
  host.processes_total = static_cast<int>(observations.size());
  if (observations.empty()) return;
  tracker.observe(detail::TickInfo{.sample_id = sample_id,
                                   .mono_ns = mono_ns,
                                   .boot_wall_ns = boot_wall_ns,
                                   .ticks_per_s = ticks_per_s},
                  observations, batch);
}

HostSampler::HostSampler(HostSamplerOptions options, Sink sink)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(sink))) {}

HostSampler::~HostSampler() {
  stop();
}

void HostSampler::start() {
  Impl& s = *impl_;
  if (s.thread.joinable()) return;
  if (!(s.options.hz > 0)) {
    throw Error(ErrorKind::usage, fmt::format("cannot sample at {} Hz: must be > 0", s.options.hz));
  }
  if (int rc = procps_pids_new(s.pids.out(), s.pids_items.data(), kPidsColumns); rc < 0) {
    throw Error(ErrorKind::proc,
                fmt::format("cannot initialise libproc2 pids: {}", std::strerror(-rc)), -rc);
  }
  if (int rc = procps_stat_new(s.stat.out()); rc < 0) {
    throw Error(ErrorKind::proc,
                fmt::format("cannot initialise libproc2 stat: {}", std::strerror(-rc)), -rc);
  }
  s.ticks_per_s = sysconf(_SC_CLK_TCK);
  if (s.ticks_per_s <= 0) s.ticks_per_s = 100;
  s.page_bytes = sysconf(_SC_PAGESIZE);
  if (s.page_bytes <= 0) s.page_bytes = 4096;
  s.boot_wall_ns = wall_now_ns() - boottime_ns();
  {
    std::lock_guard lock(s.mu);
    s.stopping = false;
  }
  s.thread = std::thread([&s] { s.run(); });
}

void HostSampler::stop() {
  if (!impl_) return;
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
  }
  s.cv.notify_all();
  if (s.thread.joinable()) s.thread.join();
}

HostSnapshot HostSampler::latest() const {
  std::lock_guard lock(impl_->mu);
  return impl_->snapshot;
}

}  // namespace stallscope::sampler
