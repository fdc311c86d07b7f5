// PoolerSampler: pgbouncer's SHOW STATS and SHOW POOLS, one poll every
// period on its own thread and its own admin-console connection.
#include "sampler/pooler.h"

#include <libpq-fe.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/conninfo.h"
#include "common/error.h"
#include "common/periodic.h"
#include "common/pg.h"
#include "common/stop_watchdog.h"
#include "common/thread_name.h"
#include "common/units.h"

namespace stallscope::sampler {
namespace {

constexpr const char* kAdminDatabase = "pgbouncer";  // the console's own pseudo-database

// A result's columns by name: pgbouncer versions add and rename columns.
class Columns {
 public:
  explicit Columns(const PGresult* res) : res_(res) {}
  // The integer in `name` at `row`; nullopt when the column is missing,
  // NULL or not an integer.
  std::optional<std::int64_t> integer(int row, const char* name) const {
    return pg::int64_or_null(res_, row, PQfnumber(res_, name));
  }
  // The text in `name` at `row`; nullopt when the column is missing or NULL.
  std::optional<std::string> text(int row, const char* name) const {
    return pg::text_or_null(res_, row, PQfnumber(res_, name));
  }
  int rows() const { return PQntuples(res_); }

 private:
  const PGresult* res_;
};

// now − before, when both are known and the counter did not go backwards.
std::optional<std::int64_t> delta(std::optional<std::int64_t> now,
                                  std::optional<std::int64_t> before, std::int64_t scale) {
  if (!now || !before || *now < *before) return std::nullopt;
  return (*now - *before) * scale;
}

void add_gauge(std::optional<std::int64_t>& into, std::optional<std::int64_t> v) {
  if (v) into = into.value_or(0) + *v;
}

}  // namespace

struct PoolerSampler::Impl {
  // SHOW STATS counters of one database (µs for times).
  struct Totals {
    std::optional<std::int64_t> xacts, queries, wait_us, xact_us, query_us;
  };

  PoolerSamplerOptions options;
  Sink sink;

  // Owned by the polling thread once it runs; replaced under conn_mu, which
  // stop()'s watchdog takes to abort a poll blocked on a hung pooler.
  pg::Conn conn;
  std::mutex conn_mu;
  RetryBackoff reconnect{100 * common::kNsPerMs, kSamplerReconnectMaxDelayNs};
  // Requested by stop(): ends a reconnect in progress on the polling thread.
  StopSource stopping;
  bool warned_lost = false;
  // The previous poll on this connection (none after a reconnect).
  std::optional<std::int64_t> prev_time_ns;
  std::map<std::string, Totals> prev;

  mutable std::mutex mu;
  PoolerSnapshot snapshot;
  PeriodicThread thread;

  Impl(PoolerSamplerOptions o, Sink s) : options(std::move(o)), sink(std::move(s)) {}

  void connect(const pg::ConnectControl& control = {}) {
    pg::Conn c = pg::connect(options.conninfo, "stallscope/pooler", control);
    {
      std::lock_guard lock(conn_mu);
      conn = std::move(c);
    }
    prev.clear();
    prev_time_ns.reset();
  }
  schema::Batch poll();
  void run_tick();
  void note_error(const std::string& message) {
    std::lock_guard lock(mu);
    ++snapshot.poll_errors;
    snapshot.last_error = message;
  }
  void drop_conn() {
    std::lock_guard lock(conn_mu);
    conn.reset();
  }
  void warn(const std::string& message) const {
    if (options.warn) options.warn(message);
  }
};

schema::Batch PoolerSampler::Impl::poll() {
  const std::string what =
      fmt::format("the pgbouncer admin console '{}'", mask_conninfo(options.conninfo));
  pg::Result stats_res = pg::exec(conn.get(), "SHOW STATS", "SHOW STATS on " + what);
  const std::int64_t time_ns = wall_now_ns();
  pg::Result pools_res = pg::exec(conn.get(), "SHOW POOLS", "SHOW POOLS on " + what);
  const Columns stats(stats_res.get()), pools(pools_res.get());
  if (PQfnumber(stats_res.get(), "database") < 0) {
    throw Error(ErrorKind::postgres,
                fmt::format("cannot poll {}: SHOW STATS has no database column", what));
  }

  std::map<std::string, Totals> now;
  for (int r = 0; r < stats.rows(); ++r) {
    auto db = stats.text(r, "database");
    if (!db || *db == kAdminDatabase) continue;
    now[*db] = Totals{.xacts = stats.integer(r, "total_xact_count"),
                      .queries = stats.integer(r, "total_query_count"),
                      .wait_us = stats.integer(r, "total_wait_time"),
                      .xact_us = stats.integer(r, "total_xact_time"),
                      .query_us = stats.integer(r, "total_query_time")};
  }
  std::map<std::string, schema::PoolerSampleRow> rows;
  auto row_of = [&](const std::string& db) -> schema::PoolerSampleRow& {
    auto [it, is_new] = rows.try_emplace(db);
    if (is_new) {
      it->second.time_ns = time_ns;
      it->second.database = db;
    }
    return it->second;
  };
  for (const auto& [db, t] : now) {
    auto& row = row_of(db);
    if (!prev_time_ns) continue;
    row.interval_ns = time_ns - *prev_time_ns;
    // A database missing from the previous poll had no pool then: from 0.
    static const Totals kZero{0, 0, 0, 0, 0};
    const auto it = prev.find(db);
    const Totals& before = it == prev.end() ? kZero : it->second;
    row.xacts = delta(t.xacts, before.xacts, 1);
    row.queries = delta(t.queries, before.queries, 1);
    row.wait_ns = delta(t.wait_us, before.wait_us, common::kNsPerUs);
    row.xact_ns = delta(t.xact_us, before.xact_us, common::kNsPerUs);
    row.query_ns = delta(t.query_us, before.query_us, common::kNsPerUs);
  }
  for (int r = 0; r < pools.rows(); ++r) {
    auto db = pools.text(r, "database");
    if (!db || *db == kAdminDatabase) continue;
    auto& row = row_of(*db);
    add_gauge(row.cl_active, pools.integer(r, "cl_active"));
    add_gauge(row.cl_waiting, pools.integer(r, "cl_waiting"));
    add_gauge(row.sv_active, pools.integer(r, "sv_active"));
    add_gauge(row.sv_idle, pools.integer(r, "sv_idle"));
    add_gauge(row.sv_used, pools.integer(r, "sv_used"));
    if (auto s = pools.integer(r, "maxwait")) {
      const std::int64_t ns =
          *s * common::kNsPerS + pools.integer(r, "maxwait_us").value_or(0) * common::kNsPerUs;
      row.maxwait_ns = std::max(row.maxwait_ns.value_or(0), ns);
    }
  }
  prev = std::move(now);
  prev_time_ns = time_ns;

  schema::Batch batch;
  batch.pooler_samples.reserve(rows.size());
  for (auto& [db, row] : rows) batch.pooler_samples.push_back(std::move(row));
  std::lock_guard lock(mu);
  ++snapshot.polls;
  return batch;
}

void PoolerSampler::Impl::run_tick() {
  if (!conn) {
    if (auto error = reconnect.attempt_if_due(mono_now_ns(),
                                              [this] { connect({.stop = stopping.token()}); })) {
      drop_conn();
      note_error(*error);
    }
  }
  if (!conn) return;
  std::optional<schema::Batch> batch;
  try {
    batch = poll();
    if (warned_lost) {
      warned_lost = false;
      warn(fmt::format("pooler sampler: polling '{}' again (counters restart from this poll)",
                       mask_conninfo(options.conninfo)));
    }
  } catch (const Error& e) {
    note_error(e.what());
    drop_conn();
    if (!warned_lost) {
      warned_lost = true;
      warn(fmt::format("pooler sampler lost its connection, retrying: {}", e.what()));
    }
  }
  if (batch && sink) sink(std::move(*batch));
}

PoolerSampler::PoolerSampler(PoolerSamplerOptions options, Sink sink)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(sink))) {}

PoolerSampler::~PoolerSampler() {
  stop();
}

void PoolerSampler::start() {
  Impl& s = *impl_;
  if (s.thread.running()) return;
  if (!(s.options.period_s > 0)) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot poll the pooler every {} s: must be > 0", s.options.period_s));
  }
  s.connect();            // throws Error(postgres) naming the masked conninfo
  auto first = s.poll();  // throws when this is not pgbouncer's admin console
  if (s.sink) s.sink(std::move(first));
  const auto period_ns = static_cast<std::int64_t>(s.options.period_s * common::kNsPerSDouble);
  s.thread.start(
      kPoolerSamplerThreadName, period_ns, [&s] { s.run_tick(); }, period_ns);
}

void PoolerSampler::stop() {
  if (!impl_) return;
  Impl& s = *impl_;
  const bool was_running = s.thread.running();
  s.stopping.request_stop();
  {
    // A poll blocked on a pooler that stopped answering would hold stop():
    // after the grace its socket is shut down, which fails the poll.
    StopWatchdog watchdog(kSamplerStopGraceNs, [&s] {
      std::lock_guard lock(s.conn_mu);
      if (s.conn) pg::abort_socket(s.conn.get());
    });
    s.thread.stop();
    if (was_running && s.conn) {
      // One last poll, so the rows cover the time up to the end of the run.
      try {
        auto last = s.poll();
        if (s.sink) s.sink(std::move(last));
      } catch (const Error& e) {
        s.note_error(e.what());
      }
    }
  }
  s.drop_conn();
}

PoolerSnapshot PoolerSampler::latest() const {
  std::lock_guard lock(impl_->mu);
  return impl_->snapshot;
}

}  // namespace stallscope::sampler
