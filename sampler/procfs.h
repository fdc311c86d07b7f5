// Private to sampler/: the hand-written /proc readers (what libproc2 4.0.2
// lacks), the per-process tracker that turns one tick's observations into
// process / process_sample rows, and a move-only owner for libproc2 handles.
//
// Nothing here includes <libproc2/...>: host_sampler.cpp converts libproc2's
// result stacks into ProcessObservation values, so this header (and the
// tests that use it) stay free of libproc2 types.
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
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

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
// /proc/PID/status: the two context-switch counters (libproc2 4.0.x has no
// item for them).

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

// Reads <proc_root>/<pid>/wchan; nullopt when missing or when the kernel
// gives no symbol ("0", empty; libproc2's "-"/"?" stand-ins are treated alike).
std::optional<std::string> read_wchan(const std::string& proc_root, int pid);

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
// iostreams: this runs ~1,000 times a tick). At most `max_bytes` are kept.
// Returns false if it cannot be opened or read.
bool read_proc_file(const std::string& path, std::string& out, std::size_t max_bytes = 65536);

// ---------------------------------------------------------------------------
// One tick's view of the processes, turned into rows.

// What the broad libproc2 reap gives for one process (strings copied out of
// libproc2's stacks). Counters are cumulative since the process started.
struct ProcessObservation {
  int pid = 0;
  std::int64_t start_ticks = 0;  // PIDS_TICS_BEGAN: with pid, identifies the process
  std::optional<int> ppid;
  char state = '?';  // PIDS_STATE letter
  std::string comm;  // PIDS_CMD
  std::int64_t utime_ticks = 0;
  std::int64_t stime_ticks = 0;
  std::int64_t majflt = 0;
  std::optional<std::int64_t> rss_bytes;
  int threads = 1;  // PIDS_NLWP; > 1: schedstat is summed over /proc/PID/task/*
};

// The tick the observations belong to.
struct TickInfo {
  std::int64_t sample_id = 0;
  std::int64_t mono_ns = 0;       // CLOCK_MONOTONIC when the tick began
  std::int64_t boot_wall_ns = 0;  // wall clock at boot: start_ns = this + start_ticks/Hz
  long ticks_per_s = 100;         // sysconf(_SC_CLK_TCK)
};

// Keeps, per process (keyed by (pid, start_ticks), so a reused pid is a new
// process), the baseline of its last row, and decides which processes get a
// row this tick:
//   - first sight: a ProcessRow and a ProcessSampleRow with every delta (and
//     span_ns) NULL;
//   - later: a ProcessSampleRow when it is active — state R or D, on-CPU time
//     or schedstat timeslices moved (utime/stime when schedstat is
//     unreadable) — or when its last row is at least heartbeat_ns old.
//     Deltas cover the span since its previous row.
// schedstat is read for every process every tick; status (context
// switches), wchan (only when state != 'R') and cmdline (first sight only)
// are read only for the processes that get a row. A process whose comm
// changed (it called exec) gets its ProcessRow again, same process_id, with
// the new comm and cmdline, and a row that tick. Processes not in a tick's
// observations are forgotten, so memory follows the process count.
// process_ids are 1, 2, ... and never reused.
class ProcessTracker {
 public:
  ProcessTracker(std::string proc_root, std::int64_t heartbeat_ns);

  // Appends this tick's rows to out.processes and out.process_samples.
  void observe(const TickInfo& tick, const std::vector<ProcessObservation>& observations,
               schema::Batch& out);

  // Processes currently remembered (= those in the last observe()).
  std::size_t tracked() const noexcept { return tracked_.size(); }

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
  };
  struct Tracked {
    std::int64_t process_id = 0;
    std::int64_t generation = 0;              // last observe() that saw it
    std::optional<Schedstat> last_schedstat;  // at the last observation
    std::int64_t last_utime_ticks = 0, last_stime_ticks = 0;
    std::string comm;                  // as last stored; a change means exec
    std::int64_t first_sample_id = 0;  // of its ProcessRow
    Baseline base;
  };

  std::string proc_root_;
  std::int64_t heartbeat_ns_;
  std::int64_t next_process_id_ = 1;
  std::int64_t generation_ = 0;
  std::unordered_map<Key, Tracked, KeyHash> tracked_;
};

// ---------------------------------------------------------------------------
// Move-only owner of a libproc2 context (`pids_info`, `stat_info`, ...),
// released with its `procps_*_unref(T**)`. Moving empties the source; the
// destructor never throws.
//
//   Proc2Handle<pids_info, procps_pids_unref> pids;
//   if (int rc = procps_pids_new(pids.out(), items, n); rc < 0) throw ...;
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
