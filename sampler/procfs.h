// Private to sampler/: the files the host sampler reads by hand — every
// per-process /proc file, /proc/pressure/* and cgroup cpu.stat:
//   - the readers and parsers of single files (schedstat, status, wchan,
//     cmdline, io, cgroup, task stat, kernel stacks, pressure, cgroup
//     cpu.stat);
//   - ProcScanner, the per-tick listing of the processes (each one's
//     /proc/PID/stat and schedstat, from files kept open between ticks);
//   - ProcessTracker, which turns one tick's ProcessObservation values into
//     process / process_sample / thread_sample rows;
//   - CgroupThrottleTracker, the cgroup_sample rows;
//   - Proc2Handle, a move-only owner for the libproc2 contexts that
//     host_sampler.cpp uses for the host-wide files (/proc/stat, meminfo,
//     vmstat, diskstats).
//
// Nothing here includes <libproc2/...> (only host_sampler.cpp does), so this
// header and the tests that use it stay free of libproc2 types.
//
// Every reader takes the proc root ("/proc", or a fake tree in a temp dir for
// tests) and a pid, and returns std::nullopt when the file is missing (the
// process vanished), unreadable (EACCES) or malformed: that is data, not an
// error, so none of them throws.
//
//   auto s = detail::read_schedstat("/proc", 1234);
//   if (s) use(s->on_cpu_ns, s->run_delay_ns, s->timeslices);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "common/wchan.h"
#include "sampler/poll_wait.h"
#include "sampler/sampler.h"
#include "schema/records.h"

namespace stallscope::sampler::detail {

// ---------------------------------------------------------------------------
// /proc/PID/schedstat: "<on-CPU ns> <run-queue wait ns> <timeslices>\n".

struct Schedstat {
  std::int64_t on_cpu_ns = 0;     // field 1: time spent on the CPU, ns
  std::int64_t run_delay_ns = 0;  // field 2: time runnable but waiting for a CPU, ns
  // field 3: times scheduled in (pcount); it changes iff the task switched
  // context, which makes it the cheap "did anything happen" test.
  std::int64_t timeslices = 0;
};

// Parses the text of a schedstat file; nullopt unless it holds three
// non-negative integers. Example: parse_schedstat("10 20 3\n")->run_delay_ns == 20.
std::optional<Schedstat> parse_schedstat(std::string_view text);
// Reads <proc_root>/<pid>/schedstat (the main thread only).
std::optional<Schedstat> read_schedstat(const std::string& proc_root, int pid);
// Sums <proc_root>/<pid>/task/*/schedstat: the whole process, every thread.
// (/proc/PID/schedstat covers only the main thread.) Threads that exited
// take their time with them, so the sum can go backwards; callers treat a
// decrease as no delta. nullopt when no task file can be read.
std::optional<Schedstat> read_schedstat_all_threads(const std::string& proc_root, int pid);

// ---------------------------------------------------------------------------
// /proc/PID/status: the two context-switch counters (cumulative counts).

struct ContextSwitches {
  std::int64_t voluntary = 0;     // "voluntary_ctxt_switches:"
  std::int64_t nonvoluntary = 0;  // "nonvoluntary_ctxt_switches:"
};

// Parses the text of a status file; nullopt unless both lines are present
// with a non-negative integer each.
std::optional<ContextSwitches> parse_status_context_switches(std::string_view text);
// Reads <proc_root>/<pid>/status.
std::optional<ContextSwitches> read_context_switches(const std::string& proc_root, int pid);

// ---------------------------------------------------------------------------
// /proc/PID/wchan: the kernel function the task sleeps in.

// The symbol of a wchan file's text, without a compiler clone suffix
// ("poll_schedule_timeout.constprop.0" → "poll_schedule_timeout"); nullopt
// when the text names none ("0" or empty, as the kernel writes; "-" and "?"
// alike).
std::optional<std::string> parse_wchan(std::string_view text);
// Reads <proc_root>/<pid>/wchan (see parse_wchan); nullopt when missing.
std::optional<std::string> read_wchan(const std::string& proc_root, int pid);
// Whether a task asleep (state S) on this wait channel is waiting for work
// rather than held up by a resource: common/wchan.h's table. A sleep held
// up (a full pipe, a socket send buffer, a completion…) gives the process a
// row every tick while it sleeps (ProcessTracker).
using common::is_idle_wchan;

// ---------------------------------------------------------------------------
// /proc/PID/cmdline: NUL-separated arguments.

// Splits cmdline text on NULs. Trailing empty arguments (the NUL padding a
// process leaves after rewriting its title, as PostgreSQL does) are dropped.
// Empty text (kernel threads, zombies) gives an empty vector.
std::vector<std::string> split_cmdline(std::string_view text);
// Reads <proc_root>/<pid>/cmdline (at most 256 KiB); nullopt when the file
// is missing or holds no argument.
std::optional<std::vector<std::string>> read_cmdline(const std::string& proc_root, int pid);

// Reads a whole small /proc file into `out` with open/read/close (no
// iostreams: it runs for several files of every process that gets a row, and
// for every file the scanner cannot keep open). At most `max_bytes` are kept.
// Returns false if it cannot be opened or read.
bool read_proc_file(const std::string& path, std::string& out, std::size_t max_bytes = 65536);

// ---------------------------------------------------------------------------
// Beyond the base columns: pressure, io, cgroup, per-thread stat, stacks.

// /proc/pressure/{cpu,io,memory}: "some avg10=.. avg60=.. avg300=.. total=<µs>"
// and the same for "full". A line that is absent (cpu's "full" before Linux
// 5.13) gives nullopt for it.
struct PressureTotals {
  std::optional<std::int64_t> some_us;  // cumulative stall time, µs
  std::optional<std::int64_t> full_us;
};
// Example: parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=12\n")->some_us == 12.
PressureTotals parse_pressure(std::string_view text);
// Reads <proc_root>/pressure/<resource>; nullopt when the file is absent
// (kernel without PSI) or unreadable.
std::optional<PressureTotals> read_pressure(const std::string& proc_root,
                                            std::string_view resource);

// /proc/PID/io: bytes the task caused to be read from / written to storage.
struct IoBytes {
  std::int64_t read_bytes = 0;   // "read_bytes:"
  std::int64_t write_bytes = 0;  // "write_bytes:"
};
std::optional<IoBytes> parse_io(std::string_view text);
// Reads <proc_root>/<pid>/io (root, or the process's owner, only).
std::optional<IoBytes> read_io(const std::string& proc_root, int pid);

// The cgroup of a process, from /proc/PID/cgroup ("<id>:<controllers>:<path>"
// lines): the path of the v1 hierarchy holding the "cpu" controller when
// there is one, else the v2 (unified, "0::") path.
struct CgroupRef {
  std::string path;  // e.g. "/system.slice/postgresql.service"
  bool v1 = false;   // true: a v1 cpu hierarchy path
};
std::optional<CgroupRef> parse_cgroup(std::string_view text);
std::optional<CgroupRef> read_cgroup(const std::string& proc_root, int pid);

// Throttling counters of a cgroup's cpu.stat, cumulative. v1 gives
// throttled_time (ns), v2 throttled_usec (µs; converted to ns). Each is
// nullopt when the file lacks it (v2 without the cpu controller).
struct CpuThrottle {
  std::optional<std::int64_t> nr_periods;
  std::optional<std::int64_t> nr_throttled;
  std::optional<std::int64_t> throttled_ns;
};
CpuThrottle parse_cpu_stat(std::string_view text);
// Finds and reads the cpu.stat of `ref` under `cgroup_root` (normally
// /sys/fs/cgroup): v1 tries <root>/cpu,cpuacct<path>, then <root>/cpu<path>;
// v2 tries <root><path>, then <root>/unified<path>. nullopt when none is
// readable.
std::optional<CpuThrottle> read_cpu_throttle(const std::string& cgroup_root, const CgroupRef& ref);

// /proc/PID/task/TID/stat: what a per-thread row needs.
struct TaskStat {
  std::string comm;
  char state = '?';
  std::int64_t start_ticks = 0;  // field 22
  std::int64_t blkio_ticks = 0;  // field 42 (delayacct)
};
// The comm is between the first '(' and the last ')', so a name holding ')'
// or spaces is kept whole. nullopt if fields are missing.
std::optional<TaskStat> parse_task_stat(std::string_view text);

// The text of a kernel stack file (/proc/PID/stack or .../task/TID/stack),
// one function per line without the "[<0>] " address prefix, lines joined
// with '\n'; nullopt when no line is left.
// Example: parse_kernel_stack("[<0>] do_wait+0x1/0x2\n") == "do_wait+0x1/0x2".
std::optional<std::string> parse_kernel_stack(std::string_view text);
// Reads a kernel stack file (see parse_kernel_stack); nullopt when it cannot
// be read (not root) or is empty.
std::optional<std::string> read_kernel_stack(const std::string& path);

// One socket of /proc/net/tcp or /proc/net/tcp6.
struct TcpSocket {
  std::uint32_t inode = 0;  // as /proc/PID/fd links it: "socket:[INODE]"
  int local_port = 0, remote_port = 0;
  bool listening = false;  // state 0A (LISTEN)
  // Bytes queued: tx_queue (sent, not yet acknowledged, or not yet sent) +
  // rx_queue (received, not yet read).
  std::int64_t queued_bytes = 0;
};
// Every socket of /proc/net/tcp or tcp6 text (a header line, then one socket
// a line: "sl local_address rem_address st … uid timeout inode …", addresses
// as HEX_IP:HEX_PORT). Lines with fewer than 10 fields, an unparsable port
// or inode 0 are skipped.
std::vector<TcpSocket> parse_tcp_sockets(std::string_view text);
// Every socket of proc_root/net/tcp and tcp6, read and parsed once each
// (sockets.cpp).
std::vector<TcpSocket> tcp_sockets(const std::string& proc_root);

// The last field of /proc/loadavg ("0.00 0.01 0.05 1/123 4567\n"): the pid
// most recently allocated in this pid namespace; nullopt unless it is a
// non-negative integer.
std::optional<std::int64_t> parse_loadavg_last_pid(std::string_view text);

// Per cgroup, the cpu.stat counters at its last row, so each row gives the
// throttling since then. A cgroup unseen for 60 s is forgotten (its next row
// has NULL deltas again), so memory follows the cgroups in use.
class CgroupThrottleTracker {
 public:
  explicit CgroupThrottleTracker(std::string cgroup_root) : root_(std::move(cgroup_root)) {}
  // One row per cgroup in `cgroups` (the cgroups of this tick's sampled
  // active processes) whose cpu.stat is readable.
  void observe(std::int64_t sample_id, std::int64_t mono_ns, const std::vector<CgroupRef>& cgroups,
               schema::Batch& out);
  std::size_t tracked() const noexcept { return state_.size(); }

 private:
  struct State {
    std::int64_t mono_ns = 0;
    CpuThrottle counters;
  };
  std::string root_;
  std::unordered_map<std::string, State> state_;  // key: "1:" / "2:" + path
};

// ---------------------------------------------------------------------------
// One tick's view of the processes, turned into rows.

// What ProcScanner reads for one process in a tick: the fields of its
// /proc/PID/stat (field numbers as in PidStat) and, for a single-threaded
// process, its schedstat. Counters are cumulative since the process started;
// ticks are clock ticks (sysconf(_SC_CLK_TCK)).
struct ProcessObservation {
  int pid = 0;
  std::int64_t start_ticks = 0;  // field 22: with pid, identifies the process
  std::optional<int> ppid;       // field 4
  char state = '?';              // field 3: R, S, D, ...
  std::string comm;              // field 2, without the parentheses
  // field 9 has PF_EXITING, or state Z/X: the process is past exit(); its
  // /proc/PID/cgroup reads "/" under cgroup v1 and its cmdline is empty, so
  // neither replaces what was read while it lived.
  bool exiting = false;
  std::int64_t utime_ticks = 0;           // field 14
  std::int64_t stime_ticks = 0;           // field 15
  std::int64_t majflt = 0;                // field 12
  std::optional<std::int64_t> rss_bytes;  // field 24 (pages) × page size
  int threads = 1;               // field 20; > 1: schedstat is summed over /proc/PID/task/*
  std::int64_t blkio_ticks = 0;  // field 42 (delay accounting; 0 while it is off)
  // /proc/PID/schedstat when the scanner already read it (single-threaded
  // processes); nullopt: the tracker reads it (or sums task/*/schedstat).
  std::optional<Schedstat> schedstat;
  // true: the fields above from /proc/PID/stat were read at an earlier tick,
  // not this one — the process is single-threaded, was sleeping (S or I)
  // then, and its schedstat has not moved since, so it has not run: only
  // rss_bytes (reclaim) and state (woken, not yet run) can be stale. The
  // tracker re-reads stat for such a process when it gives it a row.
  bool stat_cached = false;
};

// /proc/PID/stat: every field the tracker uses (see `man 5 proc`).
struct PidStat {
  int pid = 0;
  std::string comm;
  char state = '?';
  int ppid = 0;
  bool exiting = false;     // field 9 (flags) has PF_EXITING: past exit(), /proc partly torn down
  std::int64_t majflt = 0;  // field 12
  std::int64_t utime_ticks = 0;  // 14
  std::int64_t stime_ticks = 0;  // 15
  int threads = 1;               // 20
  std::int64_t start_ticks = 0;  // 22
  std::int64_t rss_pages = 0;    // 24
  std::int64_t blkio_ticks = 0;  // 42 (0 on kernels without it)
};
// nullopt unless fields 1-24 are present; comm is between the first '(' and
// the last ')'.
std::optional<PidStat> parse_pid_stat(std::string_view text);

// The per-tick listing of the processes: every process's /proc/PID/stat and
// (for single-threaded ones) schedstat, read with pread on files kept open
// from tick to tick — cheaper than opening and parsing each file every tick
// (which a libproc2 pids reap does; `tools/bench sampler` measures the
// sampler's cost per tick). Two cuts on top of that, both exact:
//   - stat (the costly file: the kernel formats 52 fields) is read again only
//     when the process may have changed: a single-threaded process that was
//     sleeping (S or I) at its last stat read and whose schedstat (on-CPU ns,
//     run delay, timeslices) has not moved since has not run, so its
//     observation reuses that read (ProcessObservation::stat_cached);
//   - the <proc_root> directory is listed again only when a pid was
//     allocated since the last listing (the last field of <proc_root>/loadavg
//     moved) — otherwise the set of processes can only have shrunk, and the
//     kept files say which exited. Without a readable loadavg (fake trees),
//     or while descriptors are short, it lists every tick.
// A kept file belongs to the process it was opened for: once that process
// exits, reads fail (ESRCH) even if the pid is reused, and the scanner
// reopens (and forgets the cached stat). When no descriptor is left (EMFILE)
// it falls back to open/read/close for the rest. Files are closed when their
// process is gone and on destruction. Not thread-safe: one tick at a time.
class ProcScanner {
 public:
  explicit ProcScanner(std::string proc_root);
  ProcScanner(const ProcScanner&) = delete;
  ProcScanner& operator=(const ProcScanner&) = delete;

  // Replaces `out` with this tick's processes; returns false (and leaves out
  // empty) when <proc_root> cannot be listed.
  bool scan(std::vector<ProcessObservation>& out, std::int64_t page_bytes);
  // Descriptors currently kept open (loadavg's included).
  std::size_t open_files() const noexcept;
  // How many scans listed <proc_root> (the others reused the last listing).
  std::int64_t listings() const noexcept { return listings_; }

 private:
  struct Files {
    common::Fd stat_fd;  // empty: not open (yet, or after a failed read)
    common::Fd schedstat_fd;
    std::int64_t generation = 0;
    std::optional<PidStat> stat;         // last stat read (kept files only)
    std::optional<Schedstat> schedstat;  // schedstat at the tick of that read, or later
  };
  // Reads a kept file; `reopened` is set when the descriptor had to be
  // (re)opened, i.e. it may now belong to another process.
  bool read_kept(common::Fd& fd, int pid, const char* name, std::string& out, bool& reopened);
  // Appends pid's observation; false when its files cannot be read.
  bool observe(int pid, Files& f, std::vector<ProcessObservation>& out, std::int64_t page_bytes);
  std::optional<std::int64_t> last_pid();
  std::string root_;
  std::unordered_map<int, Files> files_;
  std::int64_t generation_ = 0;
  std::int64_t listings_ = 0;
  bool out_of_fds_ = false;
  common::Fd loadavg_fd_;
  std::optional<std::int64_t> listed_last_pid_;  // loadavg's last pid at the last listing
  std::string buf_;
};

// Raises the RLIMIT_NOFILE soft limit to the hard limit (the scanner keeps
// two files per process open); returns the soft limit before, or nullopt
// when it could not be read. Failure to raise is not an error: the scanner
// falls back.
std::optional<std::uint64_t> raise_nofile_limit();

// The tick the observations belong to.
struct TickInfo {
  std::int64_t sample_id = 0;
  std::int64_t mono_ns = 0;        // CLOCK_MONOTONIC when the tick began
  std::int64_t boot_wall_ns = 0;   // wall clock at boot: start_ns = this + start_ticks/Hz
  long ticks_per_s = 100;          // sysconf(_SC_CLK_TCK)
  bool delayacct_on = false;       // kernel.task_delayacct = 1: blkio_delay_ns is filled
  std::int64_t page_bytes = 4096;  // sysconf(_SC_PAGESIZE): stat's rss pages → bytes
};

// What the tracker reads beyond the base columns.
struct TrackerDepth {
  // Per-thread rows: every multi-threaded process (true), or by default only
  // those whose CPU over the last second reached thread_cores_min cores.
  bool all_threads = false;
  double thread_cores_min = 0.5;
  // Read /proc/PID/stack (and per thread) of D-state tasks.
  bool kernel_stacks = false;
  // A process always sampled per thread, whatever its CPU: stallscope
  // itself, so explain can count its driver threads apart from its writer
  // and samplers. 0 = none.
  int always_threads_pid = 0;
  // A process never sampled per thread, even with all_threads: stallscope
  // itself under `record`, whose own cost is sample.sampler_cpu_ns and its
  // process_sample rows (its sampler thread would add a row every tick).
  // 0 = none.
  int never_threads_pid = 0;
  // `record` beside an application: its client processes and their
  // descendants are sampled per thread when multi-threaded, and get, when a
  // row finds them asleep in poll, select or epoll_wait, what they wait on
  // (ProcessSampleRow::poll_wait, from PollWaitReader). nullptr = none.
  std::shared_ptr<const ClientWatch> client_watch;
};

// Keeps, per process (keyed by (pid, start_ticks), so a reused pid is a new
// process), the baseline of its last row, and decides which processes get a
// row this tick:
//   - first sight: a ProcessRow and a ProcessSampleRow with every delta (and
//     span_ns) NULL;
//   - later: a ProcessSampleRow when it is active — state R or D, on-CPU time
//     or schedstat timeslices moved (utime/stime when schedstat is
//     unreadable) — or when its last row is at least heartbeat_ns old, or
//     when it is held up in the kernel: its last row saw it asleep (S) on a
//     wait channel that is not idle (is_idle_wchan), and it has not run
//     since (a quiet row every tick, its wchan that of its last row; not
//     for kernel threads, children of kthreadd). Deltas cover the span since
//     its previous row.
// Every process's schedstat is known every tick: the scanner's
// (ProcessObservation::schedstat) for a single-threaded one, else the sum of
// task/*/schedstat read here (a process sampled per thread has its task
// files read once a tick, for the sum and its thread rows alike). status
// (context switches), io, cgroup, wchan (only when state != 'R'), stack
// (state D with kernel_stacks) and cmdline (first sight only) are read only
// for the processes that get a row, and not at all for a heartbeat row of a
// process that has not run since its last row (they cannot have changed).
// An observation with stat_cached has its stat re-read when it gets a row.
// A process whose comm changed (it called exec) gets its ProcessRow again,
// same process_id, with the new comm and cmdline, and a row that tick; so
// does one whose cgroup a row finds changed. Processes not in a tick's
// observations are forgotten, so memory follows the process count.
// process_ids are 1, 2, ... and never reused.
// Helpers shared by procfs.cpp and process_tracker.cpp.
// Whether /proc/PID/stat says the task is exiting (PF_EXITING) or gone (Z, X).
bool is_exiting(const PidStat& st);
// stat's rss (pages) in bytes; nullopt when the product would not fit.
std::optional<std::int64_t> rss_bytes(std::int64_t pages, std::int64_t page_bytes);
// "<proc_root>/<pid>/<file>".
std::string pid_path(const std::string& proc_root, int pid, std::string_view file);

class ProcessTracker {
 public:
  ProcessTracker(std::string proc_root, std::int64_t heartbeat_ns, TrackerDepth depth = {});

  // Appends this tick's rows to out.processes and out.process_samples.
  void observe(const TickInfo& tick, const std::vector<ProcessObservation>& observations,
               schema::Batch& out);

  // Processes currently remembered (= those in the last observe()).
  std::size_t tracked() const noexcept { return tracked_.size(); }
  // Cgroups of the processes that got a row in the last observe() (distinct).
  const std::vector<CgroupRef>& active_cgroups() const noexcept { return active_cgroups_; }

 private:
  struct Key {
    int pid = 0;
    std::int64_t start_ticks = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept {
      return std::hash<std::int64_t>{}((static_cast<std::int64_t>(k.pid) << 40) ^ k.start_ticks);
    }
  };
  // Counter values at the process's last row (the base of the next deltas).
  struct Baseline {
    std::int64_t mono_ns = 0;
    std::optional<std::int64_t> on_cpu_ns, run_delay_ns;
    std::int64_t utime_ticks = 0, stime_ticks = 0, majflt = 0;
    std::optional<ContextSwitches> context_switches;
    std::optional<IoBytes> io;
    std::optional<std::int64_t> blkio_ticks;
  };
  struct ThreadKey {
    int tid = 0;
    std::int64_t start_ticks = 0;
    bool operator==(const ThreadKey&) const = default;
  };
  struct ThreadKeyHash {
    std::size_t operator()(const ThreadKey& k) const noexcept {
      return std::hash<std::int64_t>{}((static_cast<std::int64_t>(k.tid) << 40) ^ k.start_ticks);
    }
  };
  struct ThreadState {
    std::int64_t generation = 0;
    std::int64_t base_mono_ns = 0;
    std::optional<Schedstat> base;  // at its last row
    std::optional<Schedstat> last;  // at its last observation
  };
  struct Tracked {
    std::int64_t process_id = 0;
    std::int64_t generation = 0;              // last observe() that saw it
    std::optional<Schedstat> last_schedstat;  // at the last observation
    std::int64_t last_utime_ticks = 0, last_stime_ticks = 0;
    std::string comm;                  // as last stored; a change means exec
    std::int64_t first_sample_id = 0;  // of its ProcessRow
    Baseline base;
    std::optional<std::string> cgroup;      // as last stored
    std::optional<std::string> last_wchan;  // of its last row (reused by quiet heartbeats)
    // last_wchan is a sleep held up in the kernel (!is_idle_wchan), decided
    // once when the wchan is read, not at every tick it is reused.
    bool held_in_kernel = false;
    std::optional<schema::PollWaitRow> last_poll_wait;  // of its last row, as last_wchan
    // CPU rate over about the last second, for the per-thread decision.
    std::int64_t window_mono_ns = 0;
    std::int64_t window_cpu_ns = -1;  // -1: no window yet
    double recent_cores = 0;
    std::unordered_map<ThreadKey, ThreadState, ThreadKeyHash> threads;
  };

  // One thread's files, read once a tick for a process sampled per thread:
  // both its schedstat sum and its thread rows come from these.
  struct TaskReading {
    int tid = 0;
    TaskStat stat;
    std::optional<Schedstat> schedstat;
  };
  // Reads <proc_root>/<pid>/task/*/{stat,schedstat} into tasks_.
  void read_tasks(int pid);
  // `watched`: a record client (its sleeping threads' waits are read).
  void sample_threads(const TickInfo& tick, int pid, Tracked& t, bool watched, schema::Batch& out);
  // The process_sample row (and, at first sight or exec, the process row) of
  // a process that gets a row this tick.
  void sample_row(const TickInfo& tick, const ProcessObservation& listed, bool is_new,
                  bool exec_seen, bool quiet, bool watched,
                  const std::optional<Schedstat>& schedstat, Tracked& t, schema::Batch& out);
  // Whether depth_.client_watch watches the process (or its parent); notes
  // it for this tick's children.
  bool watch(const ProcessObservation& obs);
  // true when /proc/PID/stat, read again now, says the process (same start
  // time) is exiting or gone: a cgroup change read after `obs` is its exit.
  bool exited_since(const ProcessObservation& obs);

  std::string proc_root_;
  std::int64_t heartbeat_ns_;
  TrackerDepth depth_;
  std::vector<CgroupRef> active_cgroups_;
  std::int64_t next_process_id_ = 1;
  std::int64_t generation_ = 0;
  std::unordered_map<Key, Tracked, KeyHash> tracked_;
  std::vector<TaskReading> tasks_;  // of the process being observed (reused buffer)
  std::string text_;                // file buffer (reused)
  // depth_.client_watch: the watched pids of the last observe() and this one
  // (a child of a watched process is watched).
  std::unordered_set<int> watched_pids_, next_watched_pids_;
  ClientWatch::Snapshot watch_;  // depth_.client_watch as of this tick
  PollWaitReader poll_reader_;
};

// ---------------------------------------------------------------------------
// Move-only owner of a libproc2 context (`stat_info`, `meminfo_info`, ...),
// released with its `procps_*_unref(T**)`. Moving empties the source; the
// destructor never throws.
//
//   Proc2Handle<stat_info, procps_stat_unref> stat;
//   if (int rc = procps_stat_new(stat.out()); rc < 0) throw ...;
template <typename T, int (*Unref)(T**)>
class Proc2Handle {
 public:
  Proc2Handle() noexcept = default;
  explicit Proc2Handle(T* p) noexcept : p_(p) {}
  Proc2Handle(Proc2Handle&& other) noexcept : p_(std::exchange(other.p_, nullptr)) {}
  Proc2Handle& operator=(Proc2Handle&& other) noexcept {
    if (this != &other) {
      reset();
      p_ = std::exchange(other.p_, nullptr);
    }
    return *this;
  }
  Proc2Handle(const Proc2Handle&) = delete;
  Proc2Handle& operator=(const Proc2Handle&) = delete;
  ~Proc2Handle() { reset(); }

  T* get() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  // Releases the current handle and returns the slot for a procps_*_new call.
  T** out() noexcept {
    reset();
    return &p_;
  }
  void reset() noexcept {
    if (p_) Unref(&p_);
    p_ = nullptr;
  }

 private:
  T* p_ = nullptr;
};

}  // namespace stallscope::sampler::detail
