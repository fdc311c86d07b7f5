// Pass 1: the query table in its own order (it is clustered by start_ns), in
// one scan: the run's totals and percentiles (report.run) and the windows'
// query figures. Time windows start at the first query sent (A) and are
// grown as queries arrive; finish_windows() (windows.cpp) closes them at B
// once it is known. A query counts in the time window where it was answered
// (its latencies are held until no later query can be answered there: the
// windows from its start to its answer), and its outstanding time in every
// window it overlaps.
// A query is an error when query_error has its key: that (small) table is
// read alongside in the same key order and merged, which costs far less than
// a join's lookup per query. Skipped transactions (query_skipped: -R -L
// --skip-late, never sent) are only counted. Transactions cut short at the
// run's end (query_unfinished, a few rows) are merged in by key: their time
// in flight is outstanding time and extends the span, but they are neither
// answered nor failed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/latency_histogram.h"
#include "common/units.h"
#include "correlate/format.h"
#include "correlate/passes.h"

namespace stallscope::correlate::detail {
namespace {

// Latency statistics of one window's queries (the vector is reordered).
void fill_latency_stats(std::vector<std::int64_t>& lat, Window& w) {
  w.queries = static_cast<std::int64_t>(lat.size());
  if (lat.empty()) return;
  const auto [mn, mx] = std::minmax_element(lat.begin(), lat.end());
  w.latency_min_ms = ms(*mn);
  w.latency_max_ms = ms(*mx);
  long double sum = 0;
  for (auto v : lat) sum += v;
  const long double mean = sum / lat.size();
  long double sq = 0;
  for (auto v : lat) sq += (v - mean) * (v - mean);
  w.latency_mean_ms = double(mean / common::kNsPerMsDouble);
  w.latency_stddev_ms = double(std::sqrt(sq / lat.size()) / common::kNsPerMsDouble);
  auto rank = static_cast<std::size_t>(std::ceil(0.99 * double(lat.size())));
  rank = std::clamp<std::size_t>(rank, 1, lat.size());
  std::nth_element(lat.begin(), lat.begin() + (rank - 1), lat.end());
  w.latency_p99_ms = ms(lat[rank - 1]);
}

}  // namespace

std::int64_t query_scan_cut_ns(const RunSummary& s,
                               const Lookup<schema::LatestQueries>& latest_query_per_client) {
  std::int64_t cut_ns = std::numeric_limits<std::int64_t>::max();
  if (!s.end_ns || cut_short_by_its_file(s)) {
    const auto latest = latest_query_per_client();
    if (latest.clients > 1)
      cut_ns = std::max(latest.earliest_ns, latest.latest_ns - common::kNsPerS);
  }
  return cut_ns;
}

namespace {

// A query table whose rows do not read back as written: bad input.
[[noreturn]] void throw_damaged_query_table(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::usage,
              fmt::format("cannot read {}: the file is damaged (query table: {})", path, what));
}

// The longest latency or lag a query row may hold: what import-pgbench
// accepts (import/pgbench_log.h kMaxLatencyUs, about 73 years); `run` stores
// far less.
constexpr std::int64_t kMaxQueryNs = std::numeric_limits<std::int64_t>::max() / 4;

// The bounds every query row of a file stallscope wrote keeps, so that each
// figure explain derives from the rows fits in 64 bits: a start at or after
// the epoch, a latency and lag in 0..kMaxQueryNs, start + latency within
// 64 bits, and over the whole table Σ latency and Σ lag below 2^63 (the
// import checks the same). A row past them (a file edited by hand, a
// damaged page) makes the file damaged, as a row out of key order does.
class RowBounds {
 public:
  explicit RowBounds(const std::string& path) : path_(path) {}
  void check(const schema::QueryTiming& q) {
    const auto where = [&q] { return fmt::format("client {} seq {}", q.client_id, q.seq); };
    if (q.latency_ns < 0 || q.latency_ns > kMaxQueryNs) {
      throw_damaged_query_table(path_, fmt::format("{} has latency_ns {}, outside 0..{}", where(),
                                                   q.latency_ns, kMaxQueryNs));
    }
    if (q.lag_ns && (*q.lag_ns < 0 || *q.lag_ns > kMaxQueryNs)) {
      throw_damaged_query_table(
          path_, fmt::format("{} has lag_ns {}, outside 0..{}", where(), *q.lag_ns, kMaxQueryNs));
    }
    std::int64_t end_ns = 0;
    if (q.start_ns < 0 || __builtin_add_overflow(q.start_ns, q.latency_ns, &end_ns)) {
      throw_damaged_query_table(
          path_, fmt::format("{} has start_ns {}: before the epoch, or its end past 64 bits",
                             where(), q.start_ns));
    }
    if (__builtin_add_overflow(latency_sum_ns_, q.latency_ns, &latency_sum_ns_) ||
        __builtin_add_overflow(lag_sum_ns_, q.lag_ns.value_or(0), &lag_sum_ns_)) {
      throw_damaged_query_table(
          path_, fmt::format("the sum of latency_ns or lag_ns passes 2^63 at {}", where()));
    }
  }

 private:
  const std::string& path_;
  std::int64_t latency_sum_ns_ = 0;
  std::int64_t lag_sum_ns_ = 0;
};

// Distinct client ids (for files that do not record -c): small ids in a
// bitmap, any others in a set.
class ClientCounter {
 public:
  void add(std::int64_t c) {
    if (c >= 0 && c < 65536) {
      if (static_cast<std::size_t>(c) >= seen_.size()) seen_.resize(c + 1);
      if (!seen_[c]) {
        seen_[c] = true;
        ++count_;
      }
    } else if (others_.insert(c).second) {
      ++count_;
    }
  }
  std::int64_t count() const { return count_; }

 private:
  std::vector<bool> seen_;
  std::unordered_set<std::int64_t> others_;
  std::int64_t count_ = 0;
};

// The rows of a small side table of `query` (query_error's keys,
// query_sleep) in primary-key order, merged with the query rows: far cheaper
// than a join's lookup per query.
inline const schema::QueryKey& key_of(const schema::QueryKey& k) {
  return k;
}
inline const schema::QueryKey& key_of(const schema::QuerySleep& r) {
  return r.key;
}
inline const schema::QueryKey& key_of(const schema::ConnectionLossKey& r) {
  return r.key;
}

template <typename Row>
class SideRows {
 public:
  explicit SideRows(const RowSource<Row>& rows) : rows_(rows) { advance(); }
  // The row of the query with this key, if any; keys come in increasing order.
  const Row* find(const schema::QueryKey& key) {
    while (next_ && key_of(*next_) < key) advance();  // no query row: not counted
    if (!next_ || key_of(*next_) != key) return nullptr;
    found_ = *next_;
    advance();
    return &found_;
  }

 private:
  void advance() {
    Row row;
    if (rows_(row)) {
      next_ = row;
    } else {
      next_.reset();
    }
  }
  const RowSource<Row>& rows_;
  std::optional<Row> next_;
  Row found_;
};

// One query's outstanding time: [start, start + latency) less its \sleep
// time; under -R its first lag_ns is schedule lag.
struct Outstanding {
  std::int64_t start_ns = 0;
  std::int64_t latency_ns = 0;
  std::int64_t lag_raw_ns = 0;
  std::int64_t sleep_ns = 0;  // ≤ latency_ns
  std::int64_t lag_ns() const {
    return std::clamp<std::int64_t>(lag_raw_ns, 0, latency_ns - sleep_ns);
  }
};

// The scan's state: the run's totals, and the window being filled.
class QueryScan {
 public:
  QueryScan(const ExplainOptions& opt, Report& report) : opt_(opt), report_(report) {}

  // sleep_ns: the query's time in \sleep (query_sleep), not query time.
  // connection_lost: a failed query that lost its connection (or a failed
  // reconnect attempt), its time a window's connection_lost_ns.
  void add(std::int64_t start, std::int64_t latency, bool error, std::optional<std::int64_t> lag,
           std::int64_t sleep_ns, bool connection_lost = false) {
    auto& s = report_.run;
    extend_span(start, start + latency);
    ++s.queries;
    // As pgbench: throughput and latency count successful queries; a failed
    // one is counted apart (its latency may be unknown: 0 in a pgbench log).
    if (error) {
      ++s.errors;
    } else {
      latency_sum_ += latency;
      latency_max_ = s.queries - s.errors == 1 ? latency : std::max(latency_max_, latency);
      hist_.record_ns(latency);
      if (lag) {
        lag_max_ = lag_count_ == 0 ? *lag : std::max(lag_max_, *lag);
        lag_sum_ += *lag;
        ++lag_count_;
      }
    }
    const Outstanding o{start, latency, lag.value_or(0),
                        std::clamp<std::int64_t>(sleep_ns, 0, latency)};
    if (opt_.every_queries) {
      add_to_query_window(o, error);
      if (connection_lost) cur_.connection_lost_ns += o.latency_ns - o.sleep_ns;
    } else {
      add_to_time_window(o, error);
      if (connection_lost && !too_many_) {
        spread(o.start_ns, o.start_ns + o.latency_ns - o.sleep_ns, &Window::connection_lost_ns);
      }
    }
  }

  // A failed (re)connect attempt of the driver (08001): its row covers the
  // client's wait since its previous row. Query time and connection_lost
  // time, but neither a query nor an error (the driver counts it apart
  // from the transactions, as -t does).
  void add_connect_failure(std::int64_t start, std::int64_t latency) {
    ++report_.run.connect_failures;
    add_unanswered({start, latency, 0, 0}, true);
  }

  // A transaction cut short at the run's end: outstanding from its start
  // until the driver gave up on it (under -R, its first lag_ns schedule
  // lag), less its time in \sleep, never answered.
  void add_unfinished(std::int64_t start, std::int64_t elapsed, std::optional<std::int64_t> lag,
                      std::int64_t sleep) {
    auto& s = report_.run;
    ++s.unfinished;
    s.unfinished_max_ns = std::max(s.unfinished_max_ns, elapsed);
    add_unanswered({start, elapsed, lag.value_or(0), sleep}, false);
  }

  // After the last row: closes the last window and sets the run's figures.
  void finish() {
    auto& s = report_.run;
    if (opt_.every_queries) {
      if (!lat_.empty() || cur_.errors > 0 || cur_.query_time_ns > 0) close_query_window();
    } else if (started_) {
      close_last_time_window();
    }
    if (hist_.count() > 0) {
      s.latency_p50_ms = ms(hist_.percentile_ns(0.50));
      s.latency_p99_ms = ms(hist_.percentile_ns(0.99));
    }
    if (!started_) return;
    s.query_start_ns = queries_.start_ns;
    s.query_end_ns = queries_.end_ns;
    if (s.queries == 0) return;
    if (const auto ok = s.queries - s.errors; ok > 0) {
      s.latency_mean_ms = double(latency_sum_) / double(ok) / common::kNsPerMsDouble;
      s.latency_max_ms = ms(latency_max_);
    }
    if (lag_count_ > 0) {
      s.lag_mean_ms = double(lag_sum_) / double(lag_count_) / common::kNsPerMsDouble;
      s.lag_max_ms = ms(lag_max_);
    }
    if (queries_.duration_ns() > 0) {
      s.tps =
          double(s.queries - s.errors) / (double(queries_.duration_ns()) / common::kNsPerSDouble);
    }
  }

 private:
  // The span runs from the first row's start to the latest end.
  void extend_span(std::int64_t start, std::int64_t end) {
    if (!started_) queries_ = {start, start};
    started_ = true;
    queries_.end_ns = std::max(queries_.end_ns, end);
  }

  // Outstanding time that no answer ends (a failed connect attempt, a
  // transaction cut short at the end): query time, schedule lag and, with
  // connection_lost, the time without a server, in the windows it overlaps;
  // the span runs to its end.
  void add_unanswered(const Outstanding& o, bool connection_lost) {
    const auto end = o.start_ns + o.latency_ns;
    // Its query time, as for an answered query: the \sleep counted last.
    const auto query_end = end - o.sleep_ns;
    extend_span(o.start_ns, end);
    if (opt_.every_queries) {
      if (lat_.empty() && cur_.errors == 0 && cur_.query_time_ns == 0) {
        cur_.start_ns = o.start_ns;
        cur_end_ = o.start_ns;
      }
      cur_end_ = std::max(cur_end_, end);
      cur_.query_time_ns += query_end - o.start_ns;
      cur_.schedule_lag_ns += o.lag_ns();
      if (connection_lost) cur_.connection_lost_ns += query_end - o.start_ns;
      return;
    }
    if (!grow_to(window_of(std::max(o.start_ns, end - 1)))) return;
    close_time_windows_before(window_of(o.start_ns));
    spread(o.start_ns, query_end, &Window::query_time_ns);
    spread(o.start_ns, o.start_ns + o.lag_ns(), &Window::schedule_lag_ns);
    if (connection_lost) spread(o.start_ns, query_end, &Window::connection_lost_ns);
  }

  // Query windows (--every N): a window closes at its N-th successful query.
  void add_to_query_window(const Outstanding& o, bool error) {
    if (lat_.empty() && cur_.errors == 0) {
      cur_.start_ns = o.start_ns;
      cur_end_ = o.start_ns;
    }
    cur_end_ = std::max(cur_end_, o.start_ns + o.latency_ns);
    cur_.query_time_ns += o.latency_ns - o.sleep_ns;
    cur_.schedule_lag_ns += o.lag_ns();
    if (error) {
      ++cur_.errors;
      return;
    }
    lat_.push_back(o.latency_ns);
    if (static_cast<std::int64_t>(lat_.size()) == *opt_.every_queries) close_query_window();
  }
  void close_query_window() {
    if (static_cast<std::int64_t>(report_.windows.size()) >= kMaxWindows) {
      throw_usage(fmt::format(
          "cannot explain with --every {}: more than {} windows (at most {}, about {} MB at {} "
          "bytes each); a larger --every fits",
          *opt_.every_queries, kMaxWindows, kMaxWindows, kMaxWindows * kWindowBytes / 1'000'000,
          kWindowBytes));
    }
    fill_latency_stats(lat_, cur_);
    cur_.duration_s = double(cur_end_ - cur_.start_ns) / common::kNsPerSDouble;
    if (cur_end_ > cur_.start_ns) cur_.tps = double(cur_.queries) / cur_.duration_s;
    report_.windows.push_back(cur_);
    lat_.clear();
    cur_ = Window{};
  }

  // Time windows: window i covers [A + i·w, A + (i+1)·w), A the first query's start.
  std::int64_t window_of(std::int64_t t) const { return (t - queries_.start_ns) / opt_.window_ns; }
  // Makes windows up to index i; false when there would be too many.
  bool grow_to(std::int64_t i) {
    auto& windows = report_.windows;
    if (i >= kMaxWindows) too_many_ = true;
    if (too_many_) return false;
    for (auto k = static_cast<std::int64_t>(windows.size()); k <= i; ++k) {
      windows.emplace_back().start_ns = queries_.start_ns + k * opt_.window_ns;
      pending_.emplace_back();
    }
    return true;
  }
  // Adds [from, to)'s overlap with each window to that window's field.
  void spread(std::int64_t from, std::int64_t to, std::int64_t Window::*field) {
    const auto w = opt_.window_ns;
    for (auto k = window_of(from); from < to; ++k) {
      const auto end = queries_.start_ns + (k + 1) * w;
      report_.windows[static_cast<std::size_t>(k)].*field += std::min(to, end) - from;
      from = end;
    }
  }
  void add_to_time_window(const Outstanding& o, bool error) {
    const auto end = o.start_ns + o.latency_ns;
    // The window holding its last outstanding instant: an answer exactly at
    // a boundary closes the window before it.
    const auto answered = window_of(std::max(o.start_ns, end - 1));
    if (!grow_to(answered)) return;
    // Queries come by start: no later one is answered before this start.
    close_time_windows_before(window_of(o.start_ns));
    // Where in the transaction it slept is not stored: taken as its end
    // (a script's think time usually follows its statements).
    spread(o.start_ns, end - o.sleep_ns, &Window::query_time_ns);
    spread(o.start_ns, o.start_ns + o.lag_ns(), &Window::schedule_lag_ns);
    if (error) {
      ++report_.windows[static_cast<std::size_t>(answered)].errors;
    } else {
      pending_[static_cast<std::size_t>(answered)].push_back(o.latency_ns);
    }
  }
  // Fills the latency figures of the windows before index i (all their
  // answers are in) and frees their latencies.
  void close_time_windows_before(std::int64_t i) {
    for (; closed_ < i && closed_ < static_cast<std::int64_t>(pending_.size()); ++closed_) {
      auto& lat = pending_[static_cast<std::size_t>(closed_)];
      fill_latency_stats(lat, report_.windows[static_cast<std::size_t>(closed_)]);
      std::vector<std::int64_t>().swap(lat);
    }
  }
  // The span ends at the last answer B: windows [A, B) in steps of w. An
  // answer exactly at B (the window B would open) belongs to the last one.
  void close_last_time_window() {
    auto& windows = report_.windows;
    const auto w = opt_.window_ns;
    queries_.end_ns = std::max(queries_.end_ns, queries_.start_ns + 1);
    const auto count = std::max<std::int64_t>(1, (queries_.duration_ns() + w - 1) / w);
    if (too_many_ || count > kMaxWindows) throw_too_many_windows(w, count);
    const auto n = static_cast<std::size_t>(count);
    if (windows.size() > n) {
      for (auto k = n; k < windows.size(); ++k) {
        windows[n - 1].errors += windows[k].errors;
        pending_[n - 1].insert(pending_[n - 1].end(), pending_[k].begin(), pending_[k].end());
      }
      windows.resize(n);
      pending_.resize(n);
    }
    grow_to(count - 1);
    close_time_windows_before(count);
  }

  const ExplainOptions& opt_;
  Report& report_;
  // The whole run's percentiles in one pass and bounded memory: within 0.2 %
  // above the exact nearest rank, exact when its bucket holds one value.
  common::LatencyHistogram hist_{common::kExplainResolution};
  // First query sent → last answered or given up on (so far); finish()
  // makes it at least 1 ns. started_: a row has been added.
  Span queries_;
  bool started_ = false;
  std::int64_t latency_sum_ = 0, latency_max_ = 0;
  std::int64_t lag_sum_ = 0, lag_max_ = 0, lag_count_ = 0;  // -R
  std::vector<std::int64_t> lat_;  // query windows: latencies of the open window
  // Query windows: the one being filled and its last answer.
  Window cur_;
  std::int64_t cur_end_ = 0;
  // Time windows: per window, the latencies answered there while it is open;
  // windows before closed_ have their figures; whether there are too many.
  std::vector<std::vector<std::int64_t>> pending_;
  std::int64_t closed_ = 0;
  bool too_many_ = false;
};

}  // namespace

std::int64_t scan_queries(const QueryReads& file, const ExplainOptions& opt, Report& report) {
  auto& s = report.run;
  const auto cut_ns = file.cut_ns;
  s.skipped = file.skipped;
  SideRows<schema::QueryKey> failed(file.error_keys);
  SideRows<schema::QuerySleep> sleeps(file.sleeps);
  SideRows<schema::ConnectionLossKey> lost(file.loss_keys);
  ClientCounter clients;
  QueryScan scan(opt, report);
  RowBounds bounds(file.path);
  // Few rows (one per client in flight at the end), merged in by key, in
  // the same bounds as the query rows.
  const auto& unfinished = file.unfinished;
  auto next_unfinished = unfinished.begin();
  const auto add_unfinished_before = [&](const schema::QueryKey* key) {
    for (; next_unfinished != unfinished.end() && (!key || next_unfinished->key < *key);
         ++next_unfinished) {
      const auto& u = *next_unfinished;
      bounds.check({u.key.start_ns, u.elapsed_ns, u.key.client_id, u.key.seq, u.lag_ns});
      scan.add_unfinished(u.key.start_ns, u.elapsed_ns, u.lag_ns, u.sleep_ns);
    }
  };
  schema::QueryTiming q;
  std::int64_t rows_read = 0;
  std::optional<schema::QueryKey> previous;
  while (file.queries(q)) {
    ++rows_read;
    clients.add(q.client_id);
    const schema::QueryKey key{q.start_ns, q.client_id, q.seq};
    // Rows come in key order; a key out of order is a damaged page.
    if (previous && !(*previous < key))
      throw_damaged_query_table(file.path, "a row out of key order");
    previous = key;
    bounds.check(q);
    add_unfinished_before(&key);
    const bool error = failed.find(key) != nullptr;
    const auto* sleep = sleeps.find(key);
    const auto* loss = error ? lost.find(key) : nullptr;
    if (loss && loss->connect_failed) {
      // A failed (re)connect attempt: no transaction, but the client's
      // time without a server.
      scan.add_connect_failure(q.start_ns, q.latency_ns);
      continue;
    }
    scan.add(q.start_ns, q.latency_ns, error, q.lag_ns, sleep ? sleep->sleep_ns : 0,
             loss != nullptr);
  }
  add_unfinished_before(nullptr);
  scan.finish();
  // A range scan ends at the first row past its bound: a damaged row (a key
  // SQLite reads as text, or as a huge number) ends it early and silently,
  // leaving out every query after it. A run with an end has no writer, so
  // the table's row count is the same snapshot's (less the tail left out
  // after a failed commit, which is counted apart below).
  if (s.end_ns) {
    const auto left_out =
        cut_ns == std::numeric_limits<std::int64_t>::max() ? 0 : file.queries_after(cut_ns);
    if (const auto stored = file.query_rows(); rows_read + left_out != stored) {
      throw_damaged_query_table(
          file.path, fmt::format("{} rows read in key order of {} stored", rows_read, stored));
    }
  }
  if (s.queries > 0 && cut_ns != std::numeric_limits<std::int64_t>::max()) {
    s.queries_until_ns = cut_ns;
    if (const auto after = file.queries_after(cut_ns); after > 0) {
      report.notes.push_back(fmt::format(
          "{}: {} queries sent after the last one stored for every client are left out (some "
          "clients' rows were not {}).",
          s.end_ns ? "The run's last commit failed"
                   : "The run has no end (still running, or killed)",
          after, s.end_ns ? "written" : "yet written"));
    }
  }
  return clients.count();
}

}  // namespace stallscope::correlate::detail
