// Pass 4: process rows, spread over the span each delta covers. Also finds
// the single_thread candidates: processes off the query path (poolers on it
// included) at kSingleThreadMinCores..kSingleThreadMaxCores in some bucket of
// bucket_ns; a row's delta covers the span before its tick, so a row at time
// t belongs to the bucket holding t − 1 ns. One scan of process_sample in its
// primary-key order (sample times from a sample_id-indexed vector, no join,
// no sort); memory holds one entry per process, not per row.
#include <algorithm>
#include <climits>

#include "common/units.h"
#include "correlate/kernel_sleep.h"
#include "correlate/passes.h"

namespace stallscope::correlate::detail {
namespace {

// Rows this long after the span's end cannot cover any of it (every process
// gets a row at least every 10 s).
constexpr std::int64_t kMaxSpanNs = 60 * common::kNsPerS;

// Each sample's time, by sample_id (dense); and the first sample after the
// span's start, where the process scan begins.
class SampleTimes {
 public:
  SampleTimes(const RowSource<schema::SampleTime>& rows, Span span) {
    for (schema::SampleTime row; rows(row);) {
      const auto sid = row.sample_id;
      const auto time_ns = row.time_ns;
      if (time_.empty()) first_id_ = sid;
      const auto k = static_cast<std::size_t>(sid - first_id_);
      if (k >= time_.size()) time_.resize(k + 1, INT64_MIN);
      time_[k] = time_ns;
    }
    from_id_ = first_id_;
    while (from_id_ - first_id_ < static_cast<std::int64_t>(time_.size()) &&
           time_[static_cast<std::size_t>(from_id_ - first_id_)] <= span.start_ns) {
      ++from_id_;
    }
  }
  // The time of a sample; absent for an id without a sample row.
  std::optional<std::int64_t> time_of(std::int64_t sample_id) const {
    const auto k = static_cast<std::size_t>(sample_id - first_id_);
    if (k >= time_.size() || time_[k] == INT64_MIN) return std::nullopt;
    return time_[k];
  }
  std::int64_t from_id() const { return from_id_; }

 private:
  std::vector<std::int64_t> time_;
  std::int64_t first_id_ = 0;
  std::int64_t from_id_ = 0;
};

// The role of each process, by process_id (dense, from 1): one array lookup a
// row instead of hash lookups.
enum : std::uint8_t {
  kDriver = 1,
  kBackend = 2,
  kMiddle = 4,
  kThrottled = 8,
  kCheckpointer = 16,
};

// Per process, the single_thread scan's state: CPU per bucket as the rows
// pass in time order, and the hot buckets so far.
struct SingleThreadScan {
  std::int64_t bucket = -1;
  std::int64_t bucket_cpu_ns = 0;
  std::int64_t total_cpu_ns = 0;  // schedstat CPU of its rows at ticks in the span
  SingleThreadCandidate cand;
};

// What the pass keeps per process_id.
struct ProcessTable {
  std::vector<std::uint8_t> role;
  std::vector<const std::string*> middle_comm;  // poolers: their comm
  std::vector<int> slot_of;                     // per-query attribution: a backend's slot
  std::vector<std::int64_t> cpu_by_process;     // CPU in the span
  std::vector<SingleThreadScan> scans;
  // Query-path rows also feed the memory and kernel-wait facts
  // (add_path_process_row).
  std::unordered_map<std::int64_t, PathProcess> path_role;

  // A row of a process without a process row: no role.
  void grow(std::size_t id) {
    if (id < role.size()) return;
    role.resize(id + 1, 0);
    middle_comm.resize(id + 1, nullptr);
    cpu_by_process.resize(id + 1, 0);
    scans.resize(id + 1);
  }
};

ProcessTable make_process_table(const ProcessReads& file, const ProcessInputs& in) {
  const auto& qp = in.path;
  ProcessTable t;
  const auto max_id = file.max_process_id;
  const auto n_ids = static_cast<std::size_t>(std::max<std::int64_t>(0, max_id) + 1);
  t.role.assign(n_ids, 0);
  t.middle_comm.assign(n_ids, nullptr);
  t.cpu_by_process.assign(n_ids, 0);
  t.scans.resize(n_ids);
  auto mark = [&](std::int64_t id, std::uint8_t bit) {
    if (id >= 0 && static_cast<std::size_t>(id) < n_ids)
      t.role[static_cast<std::size_t>(id)] |= bit;
  };
  if (qp.driver_process_id) mark(*qp.driver_process_id, kDriver);
  for (auto id : qp.backend_process_ids) mark(id, kBackend);
  for (const auto& [id, comm] : qp.middle_processes) {
    mark(id, kMiddle);
    if (id >= 0 && static_cast<std::size_t>(id) < n_ids)
      t.middle_comm[static_cast<std::size_t>(id)] = &comm;
  }
  for (auto id : qp.throttled_process_ids) mark(id, kThrottled);
  for (auto id : qp.checkpointer_ids) mark(id, kCheckpointer);
  // Per-query attribution: each backend process's slot in the sweep.
  if (in.per_query) {
    t.slot_of.assign(n_ids, -1);
    for (auto id : qp.backend_process_ids) {
      const auto pid = file.pid_of(id);
      if (pid && id >= 0 && static_cast<std::size_t>(id) < n_ids) {
        t.slot_of[static_cast<std::size_t>(id)] = in.per_query->backends.slot_of_pid(*pid);
      }
    }
  }
  for (auto id : qp.backend_process_ids) t.path_role[id] = {PathRole::backend, {}};
  for (const auto& [id, comm] : qp.middle_processes) t.path_role[id] = {PathRole::pooler, comm};
  if (qp.driver_process_id) t.path_role[*qp.driver_process_id] = {PathRole::driver, {}};
  return t;
}

// The stallscope process also runs the writer and the samplers: where the
// sampler recorded its threads, the driver's CPU is its ss-driver/N threads.
bool driver_cpu_from_threads(const ProcessReads& file, const QueryPath& qp) {
  return qp.driver_process_id && file.has_driver_thread_cpu(*qp.driver_process_id);
}

// The scan of process_sample, row by row.
class ProcessScan {
 public:
  ProcessScan(const ProcessInputs& in, ProcessTable& t, std::vector<WindowAcc>& acc, Facts& f,
              Attribution& att)
      : in_(in),
        t_(t),
        acc_(acc),
        f_(f),
        att_(att),
        hot_min_(static_cast<std::int64_t>(kSingleThreadMinCores * double(in.bucket_ns))),
        hot_max_(static_cast<std::int64_t>(kSingleThreadMaxCores * double(in.bucket_ns))) {}

  // One row; t is its sample's time.
  void add(const schema::ProcessTick& st, std::int64_t t) {
    const auto id = st.process_id;
    if (id < 0) return;
    const auto uid = static_cast<std::size_t>(id);
    t_.grow(uid);
    const Row row{uid, t_.role[uid], t};
    const bool in_queries = add_attribution(st, row);
    if (row.on_path() && t <= in_.span.end_ns) add_path_facts(st, row);
    const auto cpu_col = st.cpu_ns;
    if (t <= in_.span.end_ns && cpu_col && (!(row.driver() || row.backend()) || row.middle())) {
      add_single_thread(t_.scans[uid], t, *cpu_col);
    }
    const auto span = st.span_ns;
    if (span && t - *span >= in_.span.end_ns) return;
    if (!span && t >= in_.span.end_ns) return;
    add_deltas(st, row, in_queries, cpu_col, span);
    if (row.backend() && in_queries) {  // kernel_sleep.cpp
      add_kernel_sleep(in_.windows, t, span, cpu_col, f_.sample_period_ns, st.state, st.wchan,
                       acc_);
    }
    if (row.backend() || row.checkpointer()) add_states(st, row);
  }

  // Closes every process's last bucket.
  void finish_buckets() {
    for (auto& sc : t_.scans) {
      if (sc.bucket >= 0) flush(sc);
    }
  }

 private:
  struct Row {
    std::size_t id;
    std::uint8_t role;
    std::int64_t t;
    bool driver() const { return (role & kDriver) != 0; }
    bool backend() const { return (role & kBackend) != 0; }
    bool middle() const { return (role & kMiddle) != 0; }
    bool throttled() const { return (role & kThrottled) != 0; }
    bool checkpointer() const { return (role & kCheckpointer) != 0; }
    bool on_path() const { return driver() || backend() || middle(); }
  };

  // Whether a backend served one of its queries at the tick (always true
  // without per-query attribution).
  bool serving(const Row& row) const {
    const auto* pq = in_.per_query;
    return !pq || pq->sweep.busy_ns(slot(row), row.t - kAttributionSlackNs,
                                    row.t + kAttributionSlackNs) > 0;
  }
  int slot(const Row& row) const {
    return in_.per_query && row.backend() && row.id < t_.slot_of.size() ? t_.slot_of[row.id] : -1;
  }

  // Per-query attribution: a backend's deltas count when its row's span
  // overlaps its queries. Returns whether they count.
  bool add_attribution(const schema::ProcessTick& st, const Row& row) {
    const auto* pq = in_.per_query;
    if (!pq || !row.backend()) return true;
    pq->sweep.advance_to(row.t + kAttributionSlackNs);
    const auto row_span = st.span_ns;
    return row_span ? pq->sweep.busy_ns(slot(row), row.t - *row_span, row.t) > 0 : serving(row);
  }

  void add_path_facts(const schema::ProcessTick& st, const Row& row) {
    auto it = t_.path_role.find(static_cast<std::int64_t>(row.id));
    if (it == t_.path_role.end()) return;
    const auto state = st.state;
    const auto wchan = st.wchan;
    add_path_process_row(f_, it->second, state.empty() ? '?' : state[0],
                         wchan ? std::optional<std::string>(*wchan) : std::nullopt, st.majflt);
  }

  void flush(SingleThreadScan& sc) const {
    const auto& span = in_.span;
    if (sc.bucket >= 0 && sc.bucket_cpu_ns >= hot_min_ && sc.bucket_cpu_ns <= hot_max_) {
      if (sc.cand.hot_buckets == 0)
        sc.cand.first_hot_ns = span.start_ns + sc.bucket * in_.bucket_ns;
      ++sc.cand.hot_buckets;
      sc.cand.hot_cpu_ns += sc.bucket_cpu_ns;
      sc.cand.last_hot_end_ns =
          std::min(span.end_ns, span.start_ns + (sc.bucket + 1) * in_.bucket_ns);
    }
    sc.bucket_cpu_ns = 0;
  }
  void add_single_thread(SingleThreadScan& sc, std::int64_t t, std::int64_t cpu_ns) const {
    const auto bucket = (t - 1 - in_.span.start_ns) / in_.bucket_ns;
    if (bucket != sc.bucket) {
      flush(sc);
      sc.bucket = bucket;
    }
    sc.bucket_cpu_ns += cpu_ns;
    sc.total_cpu_ns += cpu_ns;
  }

  // CPU and run delay, spread over the span the row's delta covers.
  void add_deltas(const schema::ProcessTick& st, const Row& row, bool in_queries,
                  std::optional<std::int64_t> cpu, std::optional<std::int64_t> span) {
    std::int64_t cpu_in_span = 0;
    // schedstat (summed over every thread by the sampler) is exact; the
    // 10 ms /proc/PID/stat ticks are the fallback where schedstat was
    // unreadable.
    if (!cpu && in_.clock_ticks_per_s > 0) {
      const auto utime = st.utime_ticks, stime = st.stime_ticks;
      if (utime && stime) cpu = (*utime + *stime) * common::kNsPerS / in_.clock_ticks_per_s;
    }
    const bool driver = row.driver(), backend = row.backend(), middle = row.middle();
    const bool driver_from_threads =
        driver && f_.driver_cpu_from_threads && !in_.path.external_driver;
    if (cpu) {
      spread(in_.windows, row.t, span, *cpu, [&](std::size_t w, std::int64_t v) {
        cpu_in_span += v;
        ++acc_[w].cpu_delta_rows;
        if (driver && !driver_from_threads) acc_[w].driver_cpu_ns += v;
        if (backend && in_queries) acc_[w].server_cpu_ns += v;
        if (backend && !in_queries) att_.backend_cpu_outside_ns += v;
        if (middle) acc_[w].path_cpu_ns[*t_.middle_comm[row.id]] += v;
      });
    }
    t_.cpu_by_process[row.id] += cpu_in_span;
    f_.all_cpu_ns += cpu_in_span;
    if (!row.on_path()) f_.other_cpu_ns += cpu_in_span;  // poolers: path_cpu
    if (const auto delay = st.run_delay_ns) {
      const bool driver_delay = driver && !driver_from_threads;
      const bool path_delay = driver_delay || (backend && in_queries) || middle;
      const bool throttled = path_delay && row.throttled();  // a part of the path's run delay
      spread(in_.windows, row.t, span, *delay, [&](std::size_t w, std::int64_t v) {
        f_.all_run_delay_ns += v;
        if (path_delay) acc_[w].run_delay_ns += v;
        if (driver_delay) acc_[w].driver_run_delay_ns += v;
        if (throttled) acc_[w].throttled_delay_ns += v;
      });
    }
  }

  // Backends' D state (by wchan) and the checkpointer's D state and writes,
  // in the window holding the tick.
  void add_states(const schema::ProcessTick& st, const Row& row) {
    const auto at = in_.windows.find(row.t);
    if (at < 0) return;
    const auto state = st.state;
    const bool in_d = state == "D";
    auto& a = acc_[static_cast<std::size_t>(at)];
    if (row.backend() && in_d) {
      ++f_.backend_d_rows;
      const auto wchan = std::string(st.wchan.value_or("-"));
      ++f_.backend_d_wchan_rows[wchan];
      ++a.backend_d_rows;
      ++a.backend_d_wchan_rows[wchan];
      if (serving(row)) ++a.query_d_wchan_rows[wchan];
    }
    if (row.checkpointer()) {
      if (in_d) ++a.checkpointer_d_rows;
      if (const auto bytes = st.write_bytes) a.checkpointer_write_bytes += *bytes;
    }
  }

  const ProcessInputs& in_;
  ProcessTable& t_;
  std::vector<WindowAcc>& acc_;
  Facts& f_;
  Attribution& att_;
  const std::int64_t hot_min_, hot_max_;  // single_thread: a hot bucket's CPU
};

// The driver's CPU and run delay from its ss-driver/N threads' rows.
void add_driver_threads(const ProcessReads& file, const ProcessInputs& in, const SampleTimes& times,
                        std::vector<WindowAcc>& acc) {
  const auto end_ns = in.span.end_ns;
  const auto rows = file.driver_thread_rows(*in.path.driver_process_id, times.from_id());
  schema::DriverThreadRow th;
  while (rows(th)) {
    const auto time = times.time_of(th.sample_id);
    if (!time) continue;
    const auto t = *time;
    const auto span = th.span_ns;
    if ((span && t - *span >= end_ns) || (!span && t >= end_ns)) continue;
    if (auto cpu = th.cpu_ns) {
      spread(in.windows, t, span, *cpu,
             [&](std::size_t w, std::int64_t v) { acc[w].driver_cpu_ns += v; });
    }
    if (auto delay = th.run_delay_ns) {
      spread(in.windows, t, span, *delay, [&](std::size_t w, std::int64_t v) {
        acc[w].run_delay_ns += v;
        acc[w].driver_run_delay_ns += v;
      });
    }
  }
}

// The processes with hot buckets, except the stallscope process.
void add_single_thread_candidates(const ProcessReads& file, const ProcessInputs& in,
                                  ProcessTable& t, Facts& f) {
  for (std::size_t id = 0; id < t.scans.size(); ++id) {
    auto& sc = t.scans[id];
    if (sc.bucket < 0 || sc.cand.hot_buckets == 0) continue;
    sc.cand.process.process_id = static_cast<std::int64_t>(id);
    sc.cand.process.cpu_ns = sc.total_cpu_ns;
    sc.cand.bucket_ns = in.bucket_ns;
    if (auto name = file.name_of(static_cast<std::int64_t>(id))) {
      sc.cand.process.pid = name->pid;
      sc.cand.process.comm = std::move(name->comm);
    }
    if (sc.cand.process.pid != in.stallscope_pid) f.single_thread.push_back(sc.cand);
  }
}

// The processes off the query path that used the most CPU (at most 3).
void add_top_others(const ProcessReads& file, const QueryPath& qp, const ProcessTable& t,
                    Facts& f) {
  std::vector<std::pair<std::int64_t, std::int64_t>> others;
  for (std::size_t id = 0; id < t.cpu_by_process.size(); ++id) {
    const auto cpu = t.cpu_by_process[id];
    if (!qp.is_path(static_cast<std::int64_t>(id)) && cpu > 0)
      others.emplace_back(static_cast<std::int64_t>(id), cpu);
  }
  std::sort(others.begin(), others.end(), [](auto& x, auto& y) {
    return x.second != y.second ? x.second > y.second : x.first < y.first;
  });
  for (std::size_t i = 0; i < others.size() && i < 3; ++i) {
    if (auto name = file.name_of(others[i].first)) {
      f.top_other.push_back({others[i].first, name->pid, std::move(name->comm), others[i].second});
    }
  }
}

}  // namespace

void scan_processes(const ProcessReads& file, const ProcessInputs& in, std::vector<WindowAcc>& acc,
                    Facts& f, Attribution& att) {
  const SampleTimes times(file.sample_times, in.span);
  auto table = make_process_table(file, in);
  const auto rows = file.process_rows(times.from_id());
  // An external driver (pgbench) holds no sampler thread: its process rows
  // are its CPU, with no sampler CPU to subtract (as with ss-driver rows).
  f.driver_cpu_from_threads = in.path.external_driver || driver_cpu_from_threads(file, in.path);
  ProcessScan scan(in, table, acc, f, att);
  for (schema::ProcessTick st; rows(st);) {
    const auto t = times.time_of(st.sample_id);
    if (!t) continue;
    if (*t - kMaxSpanNs >= in.span.end_ns) break;
    if (in.ash) in.ash->run_until(*t);
    scan.add(st, *t);
  }
  if (f.driver_cpu_from_threads && !in.path.external_driver)
    add_driver_threads(file, in, times, acc);
  scan.finish_buckets();
  add_single_thread_candidates(file, in, table, f);
  add_top_others(file, in.path, table, f);
}

}  // namespace stallscope::correlate::detail
