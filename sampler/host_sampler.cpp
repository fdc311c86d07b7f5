// HostSampler: one tick every 1/hz s on its own thread.
//
// Per tick: /proc/stat (libproc2 stat select), loadavg, meminfo and vmstat
// (libproc2 select), diskstats (libproc2 reap), /proc/pressure/*, then the
// process listing: detail::ProcScanner preads every process's stat and
// schedstat from files kept open between ticks (cheaper than a libproc2
// pids reap, which opens and parses each file every time), and
// detail::ProcessTracker reads status / wchan / io / cgroup / cmdline (and
// per-thread files, kernel stacks) only for the processes that get a row.
// Last, cgroup cpu.stat of the cgroups of those processes, and once a second
// the host's TCP counters (/proc/net/netstat, /proc/net/snmp:
// detail::TcpStackTracker).
// proc_root applies to the hand-read files; libproc2 reads the real /proc.
#include <libproc2/diskstats.h>
#include <libproc2/meminfo.h>
#include <libproc2/misc.h>
#include <libproc2/stat.h>
#include <libproc2/vmstat.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/periodic.h"
#include "common/thread_name.h"
#include "common/units.h"
#include "sampler/procfs.h"
#include "sampler/sampler.h"
#include "sampler/tcp_counters.h"

namespace stallscope::sampler {
namespace {

using StatHandle = detail::Proc2Handle<stat_info, procps_stat_unref>;
using MeminfoHandle = detail::Proc2Handle<meminfo_info, procps_meminfo_unref>;
using VmstatHandle = detail::Proc2Handle<vmstat_info, procps_vmstat_unref>;
using DiskstatsHandle = detail::Proc2Handle<diskstats_info, procps_diskstats_unref>;

// meminfo / vmstat / diskstats: select and reap only (their `get` caches for
// a second and moves the delta baseline); deltas are ours.
enum MemColumn : int { kMemAvailable, kMemDirty, kMemWriteback, kSwapUsed, kMemColumns };
constexpr std::array<meminfo_item, kMemColumns> kMemItems{MEMINFO_MEM_AVAILABLE, MEMINFO_MEM_DIRTY,
                                                          MEMINFO_MEM_WRITEBACK, MEMINFO_SWAP_USED};
enum VmColumn : int { kMajFault, kSwapIn, kSwapOut, kPageIn, kPageOut, kVmColumns };
constexpr std::array<vmstat_item, kVmColumns> kVmItems{
    VMSTAT_PGMAJFAULT, VMSTAT_PSWPIN, VMSTAT_PSWPOUT, VMSTAT_PGPGIN, VMSTAT_PGPGOUT};
enum DiskColumn : int {
  kDiskName,
  kDiskReads,
  kDiskWrites,
  kDiskReadSectors,
  kDiskWriteSectors,
  kDiskInFlight,
  kDiskIoTime,
  kDiskWeighted,
  kDiskColumns
};
constexpr std::array<diskstats_item, kDiskColumns> kDiskItems{
    DISKSTATS_NAME,          DISKSTATS_READS,         DISKSTATS_WRITES,  DISKSTATS_READ_SECTORS,
    DISKSTATS_WRITE_SECTORS, DISKSTATS_IO_INPROGRESS, DISKSTATS_IO_TIME, DISKSTATS_WEIGHTED_TIME};
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
struct StatRow {
  stat_stack* stack;
  unsigned long long ull_int(int col) const { return STAT_VAL(col, ull_int, stack, nullptr); }
  unsigned long ul_int(int col) const { return STAT_VAL(col, ul_int, stack, nullptr); }
};

std::int64_t boottime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * common::kNsPerS + ts.tv_nsec;
}

}  // namespace

struct HostSampler::Impl {
  // One disk's /proc/diskstats counters at a tick.
  struct DiskCounters {
    std::int64_t mono_ns = 0;
    std::int64_t reads = 0, writes = 0, read_sectors = 0, write_sectors = 0, io_ms = 0,
                 weighted_ms = 0;
  };

  HostSamplerOptions options;
  Sink sink;

  // Owned by the sampling thread once it runs.
  StatHandle stat;
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
  HostSnapshot snapshot;
  PeriodicThread thread;

  // Memory, pressure, disks, cgroups; the process listing; delay accounting.
  MeminfoHandle meminfo;
  VmstatHandle vmstat;
  DiskstatsHandle diskstats;
  std::array<meminfo_item, kMemColumns> mem_items = kMemItems;
  std::array<vmstat_item, kVmColumns> vm_items = kVmItems;
  std::array<diskstats_item, kDiskColumns> disk_items = kDiskItems;
  std::optional<std::array<std::int64_t, kVmColumns>> prev_vm;
  std::array<std::optional<std::int64_t>, 6> prev_psi;  // cpu some/full, io ..., memory ...
  std::map<std::string, DiskCounters> prev_disks;
  detail::CgroupThrottleTracker cgroups;
  detail::ProcScanner scanner;
  detail::TcpStackTracker tcp_stack;
  bool delayacct_on = false;
  std::optional<std::int64_t> delayacct_checked_ns;

  Impl(HostSamplerOptions o, Sink s)
      : options(std::move(o)),
        sink(std::move(s)),
        tracker(options.proc_root, options.heartbeat_ns,
                detail::TrackerDepth{
                    .all_threads = options.all_threads,
                    .kernel_stacks = options.kernel_stacks,
                    .always_threads_pid = options.own_threads ? static_cast<int>(getpid()) : 0,
                    .never_threads_pid = options.own_threads ? 0 : static_cast<int>(getpid()),
                    .client_watch = options.client_watch}),
        cgroups(options.cgroup_root),
        scanner(options.proc_root),
        tcp_stack(options.proc_root) {}

  void sample_memory(schema::Batch& batch);
  void sample_disks(schema::Batch& batch, std::int64_t mono_ns);

  void run_tick();  // one tick, handed to the sink
  schema::Batch tick(std::int64_t mono_ns, std::int64_t wall_ns);
  void sample_host(schema::HostSampleRow& host, HostSnapshot& snap);
  void sample_processes(schema::HostSampleRow& host, schema::Batch& batch, std::int64_t mono_ns);
};

void HostSampler::Impl::run_tick() {
  const std::int64_t wall_ns = wall_now_ns();
  const std::int64_t mono_ns = mono_now_ns();
  schema::Batch batch = tick(mono_ns, wall_ns);
  if (sink) sink(std::move(batch));
}

schema::Batch HostSampler::Impl::tick(std::int64_t mono_ns, std::int64_t wall_ns) {
  const std::int64_t cpu_begin_ns = thread_cpu_ns();
  schema::Batch batch;
  ++sample_id;
  schema::HostSampleRow host{.sample_id = sample_id};
  HostSnapshot snap{.ticks = sample_id};
  sample_host(host, snap);
  sample_memory(batch);
  sample_disks(batch, mono_ns);
  sample_processes(host, batch, mono_ns);
  cgroups.observe(sample_id, mono_ns, tracker.active_cgroups(), batch);
  tcp_stack.observe(sample_id, mono_ns, batch);
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
      ns[i] = d * common::kNsPerS / ticks_per_s;
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
  scanner.scan(observations, page_bytes);
  for (const auto& obs : observations) {
    if (obs.state == 'D') ++host.processes_d_state;
  }
  // A failed listing leaves the list empty: the tick still has
  // its system figures, and the tracker forgets nothing it cannot compare.
  host.processes_total = static_cast<int>(observations.size());
  if (observations.empty()) return;
  // kernel.task_delayacct can be switched at any time: look once a second.
  if (!delayacct_checked_ns || mono_ns - *delayacct_checked_ns >= common::kNsPerS) {
    std::string text;
    delayacct_on =
        detail::read_proc_file(options.proc_root + "/sys/kernel/task_delayacct", text, 16) &&
        text.starts_with("1");
    delayacct_checked_ns = mono_ns;
  }
  tracker.observe(detail::TickInfo{.sample_id = sample_id,
                                   .mono_ns = mono_ns,
                                   .boot_wall_ns = boot_wall_ns,
                                   .ticks_per_s = ticks_per_s,
                                   .delayacct_on = delayacct_on,
                                   .page_bytes = page_bytes},
                  observations, batch);
}

void HostSampler::Impl::sample_memory(schema::Batch& batch) {
  schema::HostMemorySampleRow row{.sample_id = sample_id};
  static constexpr std::string_view kResources[3] = {"cpu", "io", "memory"};
  std::array<std::optional<std::int64_t>, 6> psi;
  for (int i = 0; i < 3; ++i) {
    if (auto p = detail::read_pressure(options.proc_root, kResources[i])) {
      psi[2 * i] = p->some_us;
      psi[2 * i + 1] = p->full_us;
    }
  }
  std::array<std::optional<std::int64_t>, 6> d;
  for (std::size_t i = 0; i < psi.size(); ++i) {
    if (psi[i] && prev_psi[i] && *psi[i] >= *prev_psi[i]) d[i] = *psi[i] - *prev_psi[i];
  }
  prev_psi = psi;
  row.psi_cpu_some_us = d[0];
  row.psi_cpu_full_us = d[1];
  row.psi_io_some_us = d[2];
  row.psi_io_full_us = d[3];
  row.psi_memory_some_us = d[4];
  row.psi_memory_full_us = d[5];
  if (meminfo_stack* m = procps_meminfo_select(meminfo.get(), mem_items.data(), kMemColumns)) {
    auto kib = [&](int col) {
      return static_cast<std::int64_t>(MEMINFO_VAL(col, ul_int, m, nullptr)) * common::kBytesPerKiB;
    };
    row.mem_available_bytes = kib(kMemAvailable);
    row.mem_dirty_bytes = kib(kMemDirty);
    row.mem_writeback_bytes = kib(kMemWriteback);
    row.swap_used_bytes = kib(kSwapUsed);
  }
  if (vmstat_stack* v = procps_vmstat_select(vmstat.get(), vm_items.data(), kVmColumns)) {
    std::array<std::int64_t, kVmColumns> now{};
    for (int i = 0; i < kVmColumns; ++i) {
      now[i] = static_cast<std::int64_t>(VMSTAT_VAL(i, ul_int, v, nullptr));
    }
    if (prev_vm) {
      auto dv = [&](int i) -> std::optional<std::int64_t> {
        if (now[i] < (*prev_vm)[i]) return std::nullopt;
        return now[i] - (*prev_vm)[i];
      };
      row.major_faults = dv(kMajFault);
      row.swap_in_pages = dv(kSwapIn);
      row.swap_out_pages = dv(kSwapOut);
      row.page_in_kib = dv(kPageIn);
      row.page_out_kib = dv(kPageOut);
    }
    prev_vm = now;
  } else {
    prev_vm.reset();
  }
  batch.host_memory_samples.push_back(std::move(row));
}

void HostSampler::Impl::sample_disks(schema::Batch& batch, std::int64_t mono_ns) {
  if (!diskstats) return;
  diskstats_reaped* reaped =
      procps_diskstats_reap(diskstats.get(), disk_items.data(), kDiskColumns);
  if (!reaped) return;
  std::map<std::string, DiskCounters> now;
  for (int i = 0; i < reaped->total; ++i) {
    diskstats_stack* st = reaped->stacks[i];
    const char* name = DISKSTATS_VAL(kDiskName, str, st, nullptr);
    if (!name) continue;
    auto ul = [&](int col) {
      return static_cast<std::int64_t>(DISKSTATS_VAL(col, ul_int, st, nullptr));
    };
    DiskCounters c{.mono_ns = mono_ns,
                   .reads = ul(kDiskReads),
                   .writes = ul(kDiskWrites),
                   .read_sectors = ul(kDiskReadSectors),
                   .write_sectors = ul(kDiskWriteSectors),
                   .io_ms = ul(kDiskIoTime),
                   .weighted_ms = ul(kDiskWeighted)};
    const std::int64_t in_flight = DISKSTATS_VAL(kDiskInFlight, s_int, st, nullptr);
    const std::string dev = name;
    auto prev = prev_disks.find(dev);
    if (prev != prev_disks.end()) {
      const DiskCounters& p = prev->second;
      schema::DiskSampleRow row{.sample_id = sample_id,
                                .device = dev,
                                .reads = c.reads - p.reads,
                                .writes = c.writes - p.writes,
                                .read_sectors = c.read_sectors - p.read_sectors,
                                .write_sectors = c.write_sectors - p.write_sectors,
                                .in_flight = in_flight,
                                .busy_ns = (c.io_ms - p.io_ms) * common::kNsPerMs,
                                .weighted_ns = (c.weighted_ms - p.weighted_ms) * common::kNsPerMs,
                                .span_ns = mono_ns - p.mono_ns};
      const bool counters_ok = row.reads >= 0 && row.writes >= 0 && row.read_sectors >= 0 &&
                               row.write_sectors >= 0 && row.busy_ns >= 0 && row.weighted_ns >= 0;
      // An idle device (nothing completed, in flight or busy since the
      // previous tick) gets no row: its deltas would all be 0, and on a host
      // with many partitions those rows would be most of the table.
      const bool idle = row.reads == 0 && row.writes == 0 && row.busy_ns == 0 && in_flight == 0;
      if (counters_ok && !idle) batch.disk_samples.push_back(std::move(row));
    }
    now.emplace(dev, c);
  }
  prev_disks = std::move(now);
}

HostSampler::HostSampler(HostSamplerOptions options, Sink sink)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(sink))) {}

HostSampler::~HostSampler() {
  stop();
}

void HostSampler::start() {
  Impl& s = *impl_;
  if (s.thread.running()) return;
  if (!(s.options.hz > 0)) {
    throw Error(ErrorKind::usage, fmt::format("cannot sample at {} Hz: must be > 0", s.options.hz));
  }
  // The scanner keeps two files per process open.
  detail::raise_nofile_limit();
  if (int rc = procps_stat_new(s.stat.out()); rc < 0) {
    throw Error(ErrorKind::proc,
                fmt::format("cannot initialise libproc2 stat: {}", std::strerror(-rc)), -rc);
  }
  if (int rc = procps_meminfo_new(s.meminfo.out()); rc < 0) {
    throw Error(ErrorKind::proc,
                fmt::format("cannot initialise libproc2 meminfo: {}", std::strerror(-rc)), -rc);
  }
  if (int rc = procps_vmstat_new(s.vmstat.out()); rc < 0) {
    throw Error(ErrorKind::proc,
                fmt::format("cannot initialise libproc2 vmstat: {}", std::strerror(-rc)), -rc);
  }
  // A host without /proc/diskstats (some containers) simply has no disk rows.
  if (procps_diskstats_new(s.diskstats.out()) < 0) s.diskstats.reset();
  s.ticks_per_s = sysconf(_SC_CLK_TCK);
  if (s.ticks_per_s <= 0) s.ticks_per_s = 100;
  s.page_bytes = sysconf(_SC_PAGESIZE);
  if (s.page_bytes <= 0) s.page_bytes = 4096;
  s.boot_wall_ns = wall_now_ns() - boottime_ns();
  s.thread.start(kHostSamplerThreadName,
                 static_cast<std::int64_t>(common::kNsPerSDouble / s.options.hz),
                 [&s] { s.run_tick(); });
}

void HostSampler::stop() {
  if (impl_) impl_->thread.stop();
}

HostSnapshot HostSampler::latest() const {
  std::lock_guard lock(impl_->mu);
  return impl_->snapshot;
}

}  // namespace stallscope::sampler
