// Stalls: windows whose throughput fell or latency rose well beyond the run's
// typical window (robust z against median and MAD), each explained by what
// differs most from the typical windows.
#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "common/units.h"
#include "correlate/detail.h"
#include "correlate/format.h"
#include "correlate/kernel_sleep.h"

namespace stallscope::correlate::detail {
namespace {

// The median: the middle value, or the mean of the two middle values when
// there is an even number of them; 0 for none.
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  }
  return m;
}

// (median, 1.4826 × MAD): the robust centre and scale.
std::pair<double, double> centre_scale(const std::vector<double>& v) {
  const double m = median(v);
  std::vector<double> dev;
  dev.reserve(v.size());
  for (double x : v) dev.push_back(std::fabs(x - m));
  return {m, 1.4826 * median(std::move(dev))};
}

// The shares a stall is explained by, per window, as shares of its service time (WindowSignals).
struct Shares {
  double io = 0, lock = 0, lwlock = 0, throttle = 0, runqueue = 0, steal = 0;
  double kernel = 0;       // backends asleep outside wait events (kernel_sleep.cpp)
  double replication = 0;  // waits for a synchronous standby
};

Shares shares_of(const WindowSignals& g) {
  Shares s;
  if (g.service_ns <= 0) return s;
  const double c = double(g.service_ns);
  s.io = double(std::max(g.io_rows * g.ash_period_ns, g.backend_d_rows * g.sample_period_ns)) / c;
  s.lock = double(g.lock_rows * g.ash_period_ns) / c;
  s.lwlock = double(std::max<std::int64_t>(0, g.lwlock_rows) * g.ash_period_ns) / c;
  s.throttle = double(g.throttled_ns) / c;
  s.runqueue = double(g.run_delay_ns) / c;
  s.steal = g.steal_share;
  s.kernel = double(g.kernel_sleep_ns) / c;
  s.replication = double(g.replication_rows * g.ash_period_ns) / c;
  return s;
}

// The robust centre and scale of the counted windows' tps and mean latency.
struct Typical {
  double tps = 0, tps_scale = 0, latency_ms = 0, latency_scale = 0;
};

// Windows that count: with queries answered or outstanding and, for time
// windows, at least half a window long (the last one may be a sliver).
std::vector<std::size_t> counted_windows(const Report& r) {
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    const auto& w = r.windows[i];
    if ((w.queries == 0 && w.query_time_ns == 0) || !w.tps) continue;
    if (r.window_ns && double(w.end_ns - w.start_ns) < 0.5 * double(*r.window_ns)) continue;
    idx.push_back(i);
  }
  return idx;
}

// A full stop: queries outstanding in the window and none answered.
bool full_stop(const Window& w) {
  return w.queries == 0 && w.errors == 0 && w.query_time_ns > 0;
}

bool is_stalled(const Window& w, const Typical& t) {
  if (full_stop(w)) return true;
  // Queries outstanding and every one answered failed (an outage: lost
  // connections, failed reconnects) while the typical window answers some:
  // a stall whatever the spread of the windows (a long outage in a short run
  // widens the MAD until a window of 0 q/s is within 3 of it).
  if (w.queries == 0 && w.query_time_ns > 0 && t.tps > 0) return true;
  const bool slow_tps = *w.tps <= (1 - kStallMinDrop) * t.tps &&
                        (t.tps_scale == 0 || (*w.tps - t.tps) / t.tps_scale <= -kStallZ);
  const bool slow_lat =
      w.latency_mean_ms && *w.latency_mean_ms >= (1 + kStallMinDrop) * t.latency_ms &&
      (t.latency_scale == 0 || (*w.latency_mean_ms - t.latency_ms) / t.latency_scale >= kStallZ);
  return slow_tps || slow_lat;
}

double checkpointer_write_mib(const WindowSignals& g) {
  return double(g.checkpointer_write_bytes) / double(common::kBytesPerMiB);
}

// The typical shares and checkpointer writes: medians over the counted
// windows that are not stalls.
struct TypicalSignals {
  Shares shares;
  double checkpointer_write_mib = 0;
};
TypicalSignals typical_signals(const std::vector<std::size_t>& idx,
                               const std::vector<bool>& is_stall,
                               const std::vector<WindowSignals>& sig) {
  std::vector<double> io, lock, lwlock, thr, rq, st, kernel, ckpt_mib, repl;
  for (auto i : idx) {
    if (is_stall[i]) continue;
    const auto s = shares_of(sig[i]);
    io.push_back(s.io);
    lock.push_back(s.lock);
    lwlock.push_back(s.lwlock);
    thr.push_back(s.throttle);
    rq.push_back(s.runqueue);
    st.push_back(s.steal);
    kernel.push_back(s.kernel);
    repl.push_back(s.replication);
    ckpt_mib.push_back(checkpointer_write_mib(sig[i]));
  }
  Shares shares{median(io), median(lock), median(lwlock), median(thr),
                median(rq), median(st),   median(kernel)};
  shares.replication = median(repl);
  return {shares, median(ckpt_mib)};
}

// The stall's cause and its one-sentence explanation.
void explain_stall(Stall& x, const Window& w, const WindowSignals& g, const Typical& t,
                   const TypicalSignals& typical,
                   const std::function<std::string(int, std::int64_t)>& blocker_query) {
  const auto s = shares_of(g);
  const auto& typ = typical.shares;
  const double typ_ckpt_mib = typical.checkpointer_write_mib;
  // The cause: the largest rise over typical among the candidate shares.
  const std::pair<StallCause, double> deltas[] = {
      {StallCause::io_wait, s.io - typ.io},
      {StallCause::lock_wait, s.lock - typ.lock},
      {StallCause::lwlock_wait, s.lwlock - typ.lwlock},
      {StallCause::cpu_throttle, s.throttle - typ.throttle},
      {StallCause::runqueue, s.runqueue - typ.runqueue},
      {StallCause::steal, s.steal - typ.steal},
      {StallCause::kernel_wait, s.kernel - typ.kernel},
      {StallCause::replication_wait, s.replication - typ.replication}};
  auto best = std::max_element(std::begin(deltas), std::end(deltas),
                               [](auto& a, auto& b) { return a.second < b.second; });
  const double ckpt_mib = checkpointer_write_mib(g);
  const bool checkpointer_busy =
      g.checkpointer_d_rows > 0 || (ckpt_mib >= 1.0 && ckpt_mib > 2 * typ_ckpt_mib);
  const double window_s = double(w.end_ns - w.start_ns) / common::kNsPerSDouble;
  const std::string head =
      full_stop(w)
          ? fmt::format(
                "no query answered against a typical {:.0f} q/s, {:.1f} clients' worth "
                "of queries outstanding throughout: ",
                t.tps,
                window_s > 0 ? double(w.query_time_ns) / common::kNsPerSDouble / window_s : 0.0)
          : fmt::format(
                "{:.0f} q/s against a typical {:.0f} q/s, mean latency {} against {:.3f} ms: ",
                *w.tps, t.tps,
                w.latency_mean_ms ? fmt::format("{:.3f} ms", *w.latency_mean_ms) : std::string("-"),
                t.latency_ms);
  if (g.connection_errors > 0) {
    // A server restart or dropped connections: the clients were
    // reconnecting (with backoff), not waiting on anything sampled.
    x.cause = StallCause::connection_lost;
    // One code: "SQLSTATE 57P01, admin shutdown"; several: each with its count.
    const bool one_code = g.connection_sqlstates.find(',') == std::string::npos;
    const std::string codes =
        one_code ? g.top_connection_sqlstate +
                       (g.top_connection_sqlstate == "57P01" ? ", admin shutdown" : "")
                 : g.connection_sqlstates;
    // A failed query's message is the server's or libpq's, never the conninfo.
    x.culprit = fmt::format(
        "lost connections: SQLSTATE {}{}", codes,
        g.last_connection_error.empty() ? "" : fmt::format(" (last: {})", g.last_connection_error));
    // Queries that lost their connection, and the driver's failed connect
    // attempts (08001) counted apart: an attempt is not a query.
    const auto lost = g.connection_errors - g.connect_failures;
    std::string what;
    if (lost > 0)
      what = fmt::format("{} {} lost {} connection", lost, lost == 1 ? "query" : "queries",
                         lost == 1 ? "its" : "their");
    if (g.connect_failures > 0) {
      what += fmt::format("{}{} connection {} failed", what.empty() ? "" : " and ",
                          g.connect_failures, g.connect_failures == 1 ? "attempt" : "attempts");
    }
    x.explanation =
        head + fmt::format(
                   "{} in this window (SQLSTATE {}): {}, and the clients were "
                   "reconnecting{}.",
                   what, codes,
                   lost > 0 ? "the server restarted or closed the connections"
                            : "the server could not be reached",
                   g.connection_lost_ns > 0
                       ? fmt::format(" for {:.1f} s of client time in this window",
                                     double(g.connection_lost_ns) / common::kNsPerSDouble)
                       : std::string());
  } else if (best->second < kMinScore) {
    x.cause = StallCause::unexplained;
    x.explanation = head +
                    "no sampled wait, run-queue delay, throttling or steal rose by 5% of query "
                    "time or more against the typical windows.";
  } else {
    x.cause = best->first;
    if (x.cause == StallCause::io_wait) {
      if (checkpointer_busy) x.cause = StallCause::checkpoint;
      x.explanation =
          head + fmt::format(
                     "backends waited on storage for {} of query time (typical {}); {} "
                     "D-state backend samples{}{}.",
                     share_pct_text(s.io), share_pct_text(typ.io), g.backend_d_rows,
                     g.top_d_wchan.empty() ? "" : ", mostly in " + g.top_d_wchan,
                     checkpointer_busy
                         ? fmt::format("; the checkpointer wrote {:.1f} MiB (typical "
                                       "{:.1f} MiB){}",
                                       ckpt_mib, typ_ckpt_mib,
                                       g.checkpointer_d_rows > 0 ? " and sat in D state" : "")
                         : "");
    } else if (x.cause == StallCause::lock_wait) {
      std::string blocker;
      if (g.top_blocking_pid > 0) {
        auto q = blocker_query(g.top_blocking_pid, w.end_ns);
        blocker = fmt::format(", blocked mostly by pid {}{}", g.top_blocking_pid,
                              q.empty() ? "" : " running " + q);
      }
      x.explanation = head + fmt::format(
                                 "backends waited on heavyweight locks for {} of query "
                                 "time (typical {}){}.",
                                 share_pct_text(s.lock), share_pct_text(typ.lock), blocker);
    } else if (x.cause == StallCause::lwlock_wait) {
      x.explanation = head + fmt::format(
                                 "backends waited on internal locks for {} of query "
                                 "time (typical {}).",
                                 share_pct_text(s.lwlock), share_pct_text(typ.lwlock));
    } else if (x.cause == StallCause::cpu_throttle) {
      x.explanation = head + fmt::format(
                                 "the query path was throttled by a CPU quota for {} of "
                                 "query time (typical {}).",
                                 share_pct_text(s.throttle), share_pct_text(typ.throttle));
    } else if (x.cause == StallCause::kernel_wait) {
      x.culprit = sleep_culprit("backends", "backend", g.top_sleep_wchan);
      x.explanation = head + fmt::format(
                                 "backends slept in the kernel outside any wait event for {} of "
                                 "query time (typical {}): {}.",
                                 share_pct_text(s.kernel), share_pct_text(typ.kernel), x.culprit);
    } else if (x.cause == StallCause::runqueue) {
      x.explanation = head + fmt::format(
                                 "the query path waited for a CPU for {} of query time "
                                 "(typical {}).",
                                 share_pct_text(s.runqueue), share_pct_text(typ.runqueue));
    } else if (x.cause == StallCause::replication_wait) {
      // The standby is named in the stall's culprit (name_replication_stalls).
      x.explanation = head + fmt::format(
                                 "backends waited for a synchronous standby to confirm their "
                                 "commits (IPC:SyncRep) for {} of query time (typical {}).",
                                 share_pct_text(s.replication), share_pct_text(typ.replication));
    } else {
      x.explanation = head + fmt::format(
                                 "the hypervisor took {} of the CPU time wanted "
                                 "(typical {}).",
                                 share_pct_text(s.steal), share_pct_text(typ.steal));
    }
  }
  if (g.window_ns > 0 && double(g.ash_blind_ns) >= kAshBlindStallShare * double(g.window_ns)) {
    x.explanation += fmt::format(
        " ASH was blind for {:.1f} s of this window (its poll came late or not at all; the poll's "
        "own backend may have been held up too): server waits there are unsampled, and the "
        "window is read from host state.",
        double(g.ash_blind_ns) / common::kNsPerSDouble);
  }
}

// This window's figures next to the typical ones.
Evidence stall_evidence(const WindowSignals& g, const TypicalSignals& typical) {
  const auto s = shares_of(g);
  const auto& typ = typical.shares;
  const double ckpt_mib = checkpointer_write_mib(g);
  const double typ_ckpt_mib = typical.checkpointer_write_mib;
  return {{"io_wait_share", round4(s.io)},
          {"typical_io_wait_share", round4(typ.io)},
          {"backend_d_state_samples", g.backend_d_rows},
          {"top_wchan", g.top_d_wchan.empty() ? std::string("-") : g.top_d_wchan},
          {"checkpointer_write_mib", round4(ckpt_mib)},
          {"typical_checkpointer_write_mib", round4(typ_ckpt_mib)},
          {"checkpointer_d_state_samples", g.checkpointer_d_rows},
          {"lock_wait_share", round4(s.lock)},
          {"typical_lock_wait_share", round4(typ.lock)},
          {"top_blocking_pid", std::int64_t{g.top_blocking_pid}},
          {"lwlock_wait_share", round4(s.lwlock)},
          {"typical_lwlock_wait_share", round4(typ.lwlock)},
          {"throttled_share", round4(s.throttle)},
          {"typical_throttled_share", round4(typ.throttle)},
          {"run_delay_share", round4(s.runqueue)},
          {"typical_run_delay_share", round4(typ.runqueue)},
          {"steal_share", round4(s.steal)},
          {"typical_steal_share", round4(typ.steal)},
          {"kernel_wait_share", round4(s.kernel)},
          {"typical_kernel_wait_share", round4(typ.kernel)},
          {"top_sleep_wchan", g.top_sleep_wchan.empty() ? std::string("-") : g.top_sleep_wchan},
          {"ash_blind_s", round4(double(g.ash_blind_ns) / common::kNsPerSDouble)}};
}

// A stall spans windows: the window where queries stopped being answered,
// the ones where none was, and the one where the held-up queries were finally
// answered (with their long latencies, after the cause had passed). An
// unexplained stall window takes the cause of an explained one when it leads
// into it (the stall windows between them are contiguous) or when its
// slowest query was outstanding during it (answered here, sent before that
// stall's window ended).
void join_stalls(std::vector<Stall>& stalls, const std::vector<Window>& windows) {
  const auto explained = [](const Stall& x) { return x.cause != StallCause::unexplained; };
  for (std::size_t k = 0; k < stalls.size(); ++k) {
    auto& x = stalls[k];
    if (explained(x)) continue;
    const Stall* cause = nullptr;
    for (std::size_t j = k + 1;
         j < stalls.size() && stalls[j].window_index == x.window_index + (j - k); ++j) {
      if (explained(stalls[j])) {
        cause = &stalls[j];
        break;
      }
    }
    const auto slowest_sent_ns =
        x.end_ns - static_cast<std::int64_t>(x.latency_max_ms.value_or(0) * common::kNsPerMsDouble);
    for (std::size_t j = k; !cause && j-- > 0;) {
      if (explained(stalls[j]) && slowest_sent_ns < stalls[j].end_ns) cause = &stalls[j];
    }
    if (!cause) continue;
    x.cause = cause->cause;
    if (x.culprit.empty()) x.culprit = cause->culprit;
    x.explanation = fmt::format(
        "{} Part of the stall at +{:.0f} s ({}): queries held up there were answered or sent "
        "here.",
        x.explanation.substr(0, x.explanation.find(": ") + 1),
        double(cause->start_ns - windows.front().start_ns) / common::kNsPerSDouble,
        to_string(cause->cause));
  }
}

}  // namespace

std::vector<Stall> find_stalls(const Report& r, const std::vector<WindowSignals>& sig,
                               const std::function<std::string(int, std::int64_t)>& blocker_query) {
  std::vector<Stall> out;
  const auto idx = counted_windows(r);
  if (idx.size() < kStallMinWindows) return out;
  std::vector<double> tps, lat;
  for (auto i : idx) {
    tps.push_back(*r.windows[i].tps);
    if (r.windows[i].latency_mean_ms) lat.push_back(*r.windows[i].latency_mean_ms);
  }
  Typical t;
  std::tie(t.tps, t.tps_scale) = centre_scale(tps);
  std::tie(t.latency_ms, t.latency_scale) = centre_scale(lat);
  // No stall against a typical window that answered nothing because the
  // queries mostly failed: the errors finding says why. (A stall that lasts
  // most of a run has typical windows without answers too, and stays one.)
  if (t.tps <= 0 && 2 * r.run.errors >= r.run.queries) return out;
  std::vector<std::size_t> stalled;
  std::vector<bool> is_stall(r.windows.size(), false);
  for (auto i : idx) {
    if (is_stalled(r.windows[i], t)) {
      stalled.push_back(i);
      is_stall[i] = true;
    }
  }
  if (stalled.empty()) return out;
  const auto typical = typical_signals(idx, is_stall, sig);
  for (auto i : stalled) {
    const auto& w = r.windows[i];
    Stall x;
    x.window_index = i;
    x.start_ns = w.start_ns;
    x.end_ns = w.end_ns;
    x.queries = w.queries;
    x.tps = w.tps;
    x.typical_tps = t.tps;
    x.latency_mean_ms = w.latency_mean_ms;
    x.typical_latency_mean_ms = t.latency_ms;
    x.latency_max_ms = w.latency_max_ms;
    if (t.tps_scale > 0) x.tps_z = round4((*w.tps - t.tps) / t.tps_scale);
    if (t.latency_scale > 0 && w.latency_mean_ms)
      x.latency_z = round4((*w.latency_mean_ms - t.latency_ms) / t.latency_scale);
    explain_stall(x, w, sig[i], t, typical, blocker_query);
    x.evidence = stall_evidence(sig[i], typical);
    if (const auto s = shares_of(sig[i]); s.replication > 0 || typical.shares.replication > 0) {
      x.evidence.emplace_back("replication_wait_share", round4(s.replication));
      x.evidence.emplace_back("typical_replication_wait_share", round4(typical.shares.replication));
    }
    if (const auto& g = sig[i]; g.connection_errors > 0) {
      x.evidence.emplace_back("connection_errors", g.connection_errors);
      x.evidence.emplace_back("connect_failures", g.connect_failures);
      x.evidence.emplace_back("reconnecting_s",
                              round4(double(g.connection_lost_ns) / common::kNsPerSDouble));
    }
    x.evidence.insert(x.evidence.begin(),
                      {"query_time_s", round4(double(w.query_time_ns) / common::kNsPerSDouble)});
    out.push_back(std::move(x));
  }
  join_stalls(out, r.windows);
  return out;
}

}  // namespace stallscope::correlate::detail
