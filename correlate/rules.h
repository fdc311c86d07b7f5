// Private to correlate/: what the finding rules share (findings.cpp, the
// CPU and path rules and find(); wait_findings.cpp, the wait and connection
// rules): the context each rule reads (the report so far, the facts, the
// accounting and what scores are shares of), the charge of run-queue delay
// to whoever used the CPU, and small helpers for a finding's span and
// evidence.
//
//   rules::Context c{r, f, acc, service_ns, wall_ns};
//   auto x = rules::make(c, FindingKind::io_wait, c.share(io_ns));
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "correlate/detail.h"
#include "correlate/format.h"

namespace stallscope::correlate::detail::rules {

inline double ratio(double part, double whole) {
  return whole > 0 ? part / whole : 0;
}
inline double s(std::int64_t ns) {
  return round4(double(ns) / kNsPerS);
}

// The span of the windows where share_of(window) ≥ kMinScore, or the run span.
template <typename ShareOf>
Span signal_span(const Report& r, const Facts& f, ShareOf&& share_of) {
  std::optional<std::size_t> first, last;
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    if (share_of(i) >= kMinScore) {
      if (!first) first = i;
      last = i;
    }
  }
  if (!first) return f.span;
  return {r.windows[*first].start_ns, r.windows[*last].end_ns};
}

// A finding's time span.
inline void set_span(Finding& x, Span span) {
  x.start_ns = span.start_ns;
  x.end_ns = span.end_ns;
}

// Most frequent "Class:*" event among the ASH rows.
inline std::pair<std::string, std::int64_t> top_event_of_class(const Facts& f,
                                                               const std::string& cls) {
  std::pair<std::string, std::int64_t> best{"", 0};
  for (const auto& [label, rows] : f.ash_event_rows) {
    if (label.starts_with(cls + ":") && rows > best.second) best = {label, rows};
  }
  return best;
}

inline std::int64_t class_rows(const Facts& f, const std::string& cls) {
  auto it = f.ash_class_rows.find(cls);
  return it == f.ash_class_rows.end() ? 0 : it->second;
}

struct Context {
  const Report& r;
  const Facts& f;
  const Accounting* acc;  // null without queries
  double service_ns;      // detail::service_ns of the run's accounting: what scores are shares of
  std::int64_t wall_ns;
  double share(std::int64_t ns) const { return ratio(double(ns), service_ns); }
  double per_query_ms(std::int64_t ns) const {
    return r.run.queries > 0 ? round4(double(ns) / double(r.run.queries) / common::kNsPerMsDouble)
                             : 0;
  }
  double cores_used(std::int64_t ns) const { return round4(ratio(double(ns), double(wall_ns))); }
};

// Run-queue delay of the query path, charged to whoever used the CPU: a
// saturated host delays the query path because of the backends', the
// driver's or other processes' CPU demand, in proportion to each.
struct Charge {
  std::int64_t backends_ns = 0, driver_ns = 0, others_ns = 0;
};
struct RunDelayCharge {
  Charge delay;      // the query path's run delay (less what cpu_throttle claims)
  Charge remainder;  // on a saturated host: the remainder, as unmeasured contention
};

// A connection per transaction (-C): connections opened during the queries
// are at least half the transactions.
inline bool connection_per_transaction(const Facts& f, std::int64_t queries) {
  return f.connections.connections > 0 && 2 * f.connections.connections >= queries;
}

// A finding of `kind` over the run span, its score clamped to [0, 1].
inline Finding make(const Context& c, FindingKind kind, double score) {
  Finding x;
  x.kind = kind;
  x.score = round4(std::clamp(score, 0.0, 1.0));
  x.start_ns = c.f.span.start_ns;
  x.end_ns = c.f.span.end_ns;
  return x;
}

// The wait and connection rules (wait_findings.cpp); each appends its
// finding to `out` when it scores at least kMinScore.
// LWLock:WALWrite rows counted as the WAL queue (io_wait's) when there is
// storage evidence, else 0.
std::int64_t wal_queue_rows(const Facts& f);
// lock_wait / lwlock_wait from the ASH rows of `classes`, less
// `excluded_rows` (another rule's).
void ash_class(const Context& c, const std::vector<std::string>& classes, FindingKind kind,
               const std::string& what, const std::string& suggestion, std::int64_t excluded_rows,
               std::vector<Finding>& out);
void io_wait(const Context& c, std::vector<Finding>& out);
void memory_pressure(const Context& c, std::vector<Finding>& out);
void kernel_wait(const Context& c, std::vector<Finding>& out);
void connection_lost(const Context& c, std::vector<Finding>& out);
void connection_setup(const Context& c, std::vector<Finding>& out);

}  // namespace stallscope::correlate::detail::rules
