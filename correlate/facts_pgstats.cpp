// PostgreSQL statistics in explain (correlate/pg_stats_facts.h): the
// standby a replication wait waits for, and the setting that controls what
// the backends spent their CPU or I/O on (pg_stat_statements,
// pg_stat_database, pg_stat_wal).
#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "common/parse.h"
#include "common/units.h"
#include "correlate/detail.h"
#include "correlate/format.h"

namespace stallscope::correlate::detail {
namespace {

// server_cpu culprits: JIT compilation at least this share of the
// statements' time (pg_stat_statements plan + exec + JIT) ...
constexpr double kJitMinShare = 0.2;
// ... planning at least this share ...
constexpr double kPlanningMinShare = 0.3;
// temp-file spills (server_cpu or io_wait): at least this many bytes a second
// written to temp files (pg_stat_database temp_bytes, or pgss temp blocks).
constexpr double kTempMinBytesPerS = double(common::kBytesPerMiB);
// full-page writes (io_wait, server_cpu): WAL at least this many bytes a
// second, of which full-page images (at most 8 kB each) make at least half.
constexpr double kWalMinBytesPerS = double(common::kBytesPerMiB);
constexpr double kFpiMinWalShare = 0.5;
constexpr double kFpiBytes = 8192;  // a full-page image's size at most (BLCKSZ)
constexpr std::int64_t kBlockBytes = 8192;

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

double mib(double bytes) {
  return bytes / double(common::kBytesPerMiB);
}

// Counter difference over the span, 0 when a side is absent or it went
// backwards (a stats reset).
std::int64_t delta(const std::optional<std::int64_t>& a, const std::optional<std::int64_t>& b) {
  if (!a || !b || *b < *a) return 0;
  return *b - *a;
}

// A standby's largest lags, reply age and unconfirmed WAL, as ", …" text.
std::string lag_text(const StandbyFacts& s) {
  std::string out;
  auto add = [&](const char* what, const std::optional<std::int64_t>& ns) {
    if (ns) out += fmt::format(", {} up to {:.0f} ms", what, ms(*ns));
  };
  add("flush lag", s.flush_lag_max_ns);
  add("replay lag", s.replay_lag_max_ns);
  if (s.reply_age_max_ns)
    out += fmt::format(", last reply up to {:.1f} s old",
                       double(*s.reply_age_max_ns) / common::kNsPerSDouble);
  if (s.flush_behind_max_bytes && *s.flush_behind_max_bytes > 0) {
    const auto bytes = double(*s.flush_behind_max_bytes);
    out += bytes < double(common::kBytesPerMiB)
               ? fmt::format(", up to {:.0f} kB of WAL unconfirmed",
                             bytes / double(common::kBytesPerKiB))
               : fmt::format(", up to {:.1f} MiB of WAL unconfirmed", mib(bytes));
  }
  return out;
}

}  // namespace

bool is_replication_wait(std::string_view label) {
  return label == "IPC:SyncRep";
}

std::string PgStatsFacts::setting(const std::string& name) const {
  auto it = settings.find(name);
  if (it == settings.end()) return "";
  const auto& [value, unit] = it->second;
  if (unit.empty() || value.empty()) return value;
  // Sizes and times as PostgreSQL shows them: 4096 × kB → 4MB.
  const auto parsed = common::parse_int64(value);
  if (!parsed) return value;
  const std::int64_t n = *parsed;
  if (unit == "kB" || unit == "8kB" || unit == "MB") {
    std::int64_t kib = unit == "kB" ? n : unit == "8kB" ? 8 * n : 1024 * n;
    if (kib % (1024 * 1024) == 0) return fmt::format("{}GB", kib / (1024 * 1024));
    if (kib % 1024 == 0) return fmt::format("{}MB", kib / 1024);
    return fmt::format("{}kB", kib);
  }
  if (unit == "s" && n % 60 == 0 && n > 0) return fmt::format("{}min", n / 60);
  return value + unit;
}

std::vector<std::string> sync_standby_names(std::string_view value) {
  std::vector<std::string> out;
  auto open = value.find('(');
  auto close = value.rfind(')');
  if (open != std::string_view::npos && close != std::string_view::npos && close > open) {
    value = value.substr(open + 1, close - open - 1);
  }
  while (!value.empty()) {
    const auto comma = value.find(',');
    auto name = trim(value.substr(0, comma));
    if (name.size() >= 2 && name.front() == '"' && name.back() == '"')
      name = name.substr(1, name.size() - 2);
    if (!name.empty()) out.push_back(std::move(name));
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return out;
}

PgStatsFacts pg_stats_facts(PgStatsInputs in) {
  PgStatsFacts p;
  p.settings = std::move(in.settings);
  p.counters = std::move(in.counters);
  p.statements = std::move(in.statements);
  std::map<std::string, StandbyFacts> by_name;
  for (const auto& r : in.replication) {
    auto& s = by_name[r.application_name.value_or("")];
    s.name = r.application_name.value_or("");
    s.client_addr = r.client_addr.value_or("local");
    s.state = r.state.value_or("");
    s.sync_state = r.sync_state.value_or("");
    ++s.polls;
    keep_max(s.write_lag_max_ns, r.write_lag_ns);
    keep_max(s.flush_lag_max_ns, r.flush_lag_ns);
    keep_max(s.replay_lag_max_ns, r.replay_lag_ns);
    keep_max(s.flush_behind_max_bytes, r.flush_behind_bytes);
    keep_max(s.reply_age_max_ns, r.reply_age_ns);
  }
  for (auto& [name, s] : by_name) p.standbys.push_back(std::move(s));
  std::stable_sort(p.standbys.begin(), p.standbys.end(),
                   [](const auto& x, const auto& y) { return x.polls > y.polls; });
  if (auto it = p.settings.find("synchronous_standby_names"); it != p.settings.end()) {
    for (const auto& name : sync_standby_names(it->second.setting)) {
      if (name == "*") continue;
      const bool seen = std::any_of(p.standbys.begin(), p.standbys.end(),
                                    [&](const auto& s) { return s.name == name; });
      if (!seen) p.missing_sync_standbys.push_back(name);
    }
  }
  return p;
}

std::string replication_culprit(const Facts& f) {
  const auto& p = f.pg_stats;
  // A synchronous standby that was listed: the one holding commits.
  const StandbyFacts* named = nullptr;
  for (const auto& s : p.standbys) {
    if (s.sync_state == "sync" || s.sync_state == "quorum") {
      named = &s;
      break;
    }
  }
  if (!named && p.missing_sync_standbys.empty() && !p.standbys.empty()) named = &p.standbys.front();
  std::string out;
  if (named) {
    const auto polls = p.counters ? p.counters->polls : 0;
    out = fmt::format("standby '{}' ({}): state {}, sync_state {}{}{}", named->name,
                      named->client_addr, named->state, named->sync_state, lag_text(*named),
                      polls > named->polls
                          ? fmt::format(", connected in {} of {} polls", named->polls, polls)
                          : std::string());
  }
  for (const auto& name : p.missing_sync_standbys) {
    out += fmt::format("{}standby '{}' named in synchronous_standby_names but not connected",
                       out.empty() ? "" : "; ", name);
  }
  if (out.empty() && p.counters) {
    const auto names = p.setting("synchronous_standby_names");
    out = names.empty()
              ? "no standby connected (pg_stat_replication empty)"
              : fmt::format("synchronous_standby_names = '{}': no standby connected", names);
  }
  return out;
}

void replication_wait(const Report& r, const Facts& f, std::vector<Finding>& out) {
  std::int64_t rows = 0;
  for (const auto& [label, n] : f.ash_event_rows) {
    if (is_replication_wait(label)) rows += n;
  }
  if (rows == 0) return;
  const auto* a = r.accounting ? &*r.accounting : nullptr;
  const auto wait_ns = rows * f.ash_period_ns;
  const double service = a ? double(service_ns(*a)) : 0.0;
  double score = a ? (service > 0 ? double(wait_ns) / service : 0.0)
                   : (f.ash_rows > 0 ? double(rows) / double(f.ash_rows) : 0.0);
  Finding x;
  x.kind = FindingKind::replication_wait;
  x.score = round4(std::clamp(score, 0.0, 1.0));
  if (x.score < kMinScore) return;
  // The span: the windows whose most frequent ASH state was the wait.
  x.start_ns = f.span.start_ns;
  x.end_ns = f.span.end_ns;
  std::optional<std::size_t> first, last;
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    if (r.windows[i].top_wait_event && is_replication_wait(*r.windows[i].top_wait_event)) {
      if (!first) first = i;
      last = i;
    }
  }
  if (first) {
    x.start_ns = r.windows[*first].start_ns;
    x.end_ns = r.windows[*last].end_ns;
  }
  x.culprit = replication_culprit(f);
  const auto& p = f.pg_stats;
  x.summary = fmt::format(
      "{} waited for a synchronous standby to confirm their commits (IPC:SyncRep) for {} of {}{}.",
      a ? "This run's backends" : "Client backends", share_pct_text(x.score),
      a ? "query time" : "sampled non-idle moments",
      // The standby, in short: the culprit up to its figures.
      x.culprit.empty() ? "" : ": " + x.culprit.substr(0, x.culprit.find_first_of(":;")));
  x.evidence = {{"replication_wait_share", x.score},
                {"replication_wait_s", round4(double(wait_ns) / common::kNsPerSDouble)},
                {"ash_samples", rows},
                {"synchronous_standby_names", p.setting("synchronous_standby_names")},
                {"synchronous_commit", p.setting("synchronous_commit")}};
  if (p.counters) {
    x.evidence.emplace_back("stats_polls", p.counters->polls);
    x.evidence.emplace_back("polls_without_walsender", p.counters->polls_without_walsender);
  }
  for (std::size_t i = 0; i < p.standbys.size() && i < 3; ++i) {
    const auto& s = p.standbys[i];
    const auto k = fmt::format("standby_{}", i + 1);
    x.evidence.emplace_back(
        k, fmt::format("{} ({}, {}, {})", s.name, s.client_addr, s.state, s.sync_state));
    if (s.flush_lag_max_ns)
      x.evidence.emplace_back(k + "_flush_lag_max_ms", round4(ms(*s.flush_lag_max_ns)));
    if (s.reply_age_max_ns)
      x.evidence.emplace_back(k + "_reply_age_max_s",
                              round4(double(*s.reply_age_max_ns) / common::kNsPerSDouble));
    if (s.flush_behind_max_bytes)
      x.evidence.emplace_back(k + "_flush_behind_max_bytes", *s.flush_behind_max_bytes);
  }
  if (!p.missing_sync_standbys.empty()) {
    std::string names;
    for (const auto& n : p.missing_sync_standbys) names += (names.empty() ? "" : ", ") + n;
    x.evidence.emplace_back("sync_standbys_not_connected", names);
  }
  x.suggestion =
      "Commits wait until a synchronous standby confirms their WAL: check that standby (is its "
      "walreceiver running and keeping up: pg_stat_replication, its disk and network), take a "
      "standby that is gone out of synchronous_standby_names, or set synchronous_commit = local "
      "for the transactions that can do without the remote confirmation.";
  out.push_back(std::move(x));
}

std::optional<SettingCulprit> setting_culprit(const Report& r, const Facts& f, FindingKind kind) {
  const auto& p = f.pg_stats;
  const double span_s = double(f.span.duration_ns()) / common::kNsPerSDouble;
  if (span_s <= 0 || (!p.statements && !p.counters)) return std::nullopt;
  std::optional<SettingCulprit> out;
  // pg_stat_statements: JIT and planning as shares of the statements' time.
  std::int64_t stmt_ns = 0, plan_ns = 0, jit_ns = 0, calls = 0, temp_blks = 0;
  if (p.statements) {
    for (const auto& e : p.statements->entries) {
      stmt_ns += e.exec_ns + e.plan_ns;
      plan_ns += e.plan_ns;
      jit_ns += e.jit_ns();
      calls += e.calls;
      temp_blks += e.temp_blks_written;
    }
  }
  // JIT code is generated mostly in ExecutorStart, outside what
  // pg_stat_statements counts as execution: its share is of planning +
  // execution + JIT (an underestimate where part of it fell inside).
  const double jit_share = stmt_ns + jit_ns > 0 ? double(jit_ns) / double(stmt_ns + jit_ns) : 0;
  const double plan_share = stmt_ns > 0 ? double(plan_ns) / double(stmt_ns) : 0;
  // pg_stat_database / pg_stat_wal over the span.
  std::int64_t xacts = 0, temp_bytes = 0, temp_files = 0, wal_bytes = 0, wal_fpi = 0,
               checkpoints = 0;
  if (p.counters) {
    const auto& a = p.counters->first;
    const auto& b = p.counters->last;
    xacts = delta(a.xact_commit, b.xact_commit) + delta(a.xact_rollback, b.xact_rollback);
    temp_bytes = delta(a.temp_bytes, b.temp_bytes);
    temp_files = delta(a.temp_files, b.temp_files);
    wal_bytes = delta(a.wal_bytes, b.wal_bytes);
    wal_fpi = delta(a.wal_fpi, b.wal_fpi);
    checkpoints = delta(a.checkpoints_timed, b.checkpoints_timed) +
                  delta(a.checkpoints_req, b.checkpoints_req);
  }
  temp_bytes = std::max(temp_bytes, temp_blks * kBlockBytes);
  const double per_xact = double(std::max<std::int64_t>(1, xacts ? xacts : r.run.queries));
  Evidence ev;
  if (p.statements) {
    ev.emplace_back("pgss_statement_s", round4(double(stmt_ns) / common::kNsPerSDouble));
    ev.emplace_back("pgss_calls", calls);
    if (p.statements->has_jit) ev.emplace_back("jit_share", round4(jit_share));
    if (p.statements->has_planning) ev.emplace_back("planning_share", round4(plan_share));
  }
  if (p.counters) {
    ev.emplace_back("transactions", xacts);
    ev.emplace_back("temp_bytes_per_s", round4(double(temp_bytes) / span_s));
    ev.emplace_back("temp_bytes_per_xact", round4(double(temp_bytes) / per_xact));
    ev.emplace_back("temp_files", temp_files);
    ev.emplace_back("wal_bytes_per_xact", round4(double(wal_bytes) / per_xact));
    ev.emplace_back("wal_fpi_per_xact", round4(double(wal_fpi) / per_xact));
    ev.emplace_back("checkpoints", checkpoints);
  }
  auto make = [&](std::string culprit, std::string suggestion) {
    out = SettingCulprit{std::move(culprit), ev, std::move(suggestion)};
  };
  out = SettingCulprit{"", ev, ""};  // the figures, with no setting named
  const bool cpu = kind == FindingKind::server_cpu;
  const double temp_per_s = double(temp_bytes) / span_s;
  const double wal_per_s = double(wal_bytes) / span_s;
  const bool fpi_heavy = wal_per_s >= kWalMinBytesPerS &&
                         double(wal_fpi) * kFpiBytes >= kFpiMinWalShare * double(wal_bytes);
  if (cpu && jit_share >= kJitMinShare && p.setting("jit") != "off") {
    make(fmt::format("jit = {}, jit_above_cost = {}: JIT compiled {} of backend time "
                     "(pg_stat_statements: {:.3f} ms of JIT per call)",
                     p.setting("jit").empty() ? "on" : p.setting("jit"),
                     p.setting("jit_above_cost").empty() ? "?" : p.setting("jit_above_cost"),
                     share_pct_text(jit_share), calls > 0 ? ms(jit_ns) / double(calls) : 0.0),
         "JIT compilation costs more than it saves on these queries: raise jit_above_cost (and "
         "jit_inline_above_cost, jit_optimize_above_cost) above their plan cost, or set jit = "
         "off for this workload (ALTER ROLE … SET jit = off).");
  } else if (cpu && plan_share >= kPlanningMinShare) {
    make(fmt::format("planning took {} of backend time (plan_cache_mode = {}; pg_stat_statements: "
                     "{:.3f} ms of planning per call)",
                     share_pct_text(plan_share),
                     p.setting("plan_cache_mode").empty() ? "auto" : p.setting("plan_cache_mode"),
                     calls > 0 ? ms(plan_ns) / double(calls) : 0.0),
         "Each statement is planned again: use prepared statements (protocol prepared, or the "
         "driver's statement cache), and check plan_cache_mode; a pooler in transaction mode "
         "needs protocol-level prepared statement support.");
  } else if (temp_per_s >= kTempMinBytesPerS && kind != FindingKind::lwlock_wait) {
    make(fmt::format("work_mem = {}: queries spilled {:.1f} MiB/s to temp files ({:.1f} MiB per "
                     "transaction, {} files)",
                     p.setting("work_mem").empty() ? "?" : p.setting("work_mem"), mib(temp_per_s),
                     mib(double(temp_bytes) / per_xact), temp_files),
         "Sorts and hashes spill to temp files: raise work_mem for this query or role (SET "
         "work_mem, ALTER ROLE … SET work_mem) until EXPLAIN (ANALYZE) shows no 'Disk:'; or make "
         "the query sort less.");
  } else if (fpi_heavy &&
             (kind == FindingKind::io_wait || kind == FindingKind::lwlock_wait || cpu)) {
    make(fmt::format("full_page_writes = {}: {:.1f} full-page images per transaction, {:.1f} kB "
                     "of WAL per transaction after {} checkpoint{} (checkpoint_timeout = {}, "
                     "max_wal_size = {}, wal_compression = {})",
                     p.setting("full_page_writes").empty() ? "on" : p.setting("full_page_writes"),
                     double(wal_fpi) / per_xact,
                     double(wal_bytes) / per_xact / double(common::kBytesPerKiB), checkpoints,
                     checkpoints == 1 ? "" : "s", p.setting("checkpoint_timeout"),
                     p.setting("max_wal_size"), p.setting("wal_compression")),
         "After each checkpoint the first change to every page writes the whole page to WAL: "
         "space checkpoints out (checkpoint_timeout, max_wal_size), turn on wal_compression, "
         "and look for what requested checkpoints (checkpoints_req).");
  }
  return out;
}

void add_setting_culprits(const Report& r, const Facts& f, std::vector<Finding>& out) {
  for (auto& x : out) {
    if (x.kind != FindingKind::server_cpu && x.kind != FindingKind::io_wait &&
        x.kind != FindingKind::lwlock_wait) {
      continue;
    }
    auto c = setting_culprit(r, f, x.kind);
    if (!c) continue;
    for (auto& e : c->evidence) x.evidence.push_back(std::move(e));
    if (c->culprit.empty()) continue;
    x.culprit = std::move(c->culprit);
    x.suggestion = std::move(c->suggestion) + " " + x.suggestion;
  }
}

void name_replication_stalls(const Facts& f, std::vector<Stall>& stalls) {
  std::optional<std::string> culprit;
  for (auto& s : stalls) {
    if (s.cause != StallCause::replication_wait) continue;
    if (!culprit) culprit = replication_culprit(f);
    s.culprit = *culprit;
  }
}

}  // namespace stallscope::correlate::detail
