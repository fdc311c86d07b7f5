// Pooler sampler: polls pgbouncer's admin console (SHOW STATS, SHOW POOLS)
// on its own thread and hands one PoolerSampleRow per database per poll to a
// sink (schema/v1.sql pooler_sample). It never touches SQLite.
//
//   sampler::PoolerSampler pooler({.conninfo = "host=127.0.0.1 port=6432 dbname=pgbouncer"},
//                                 [&](schema::Batch b) { writer.submit(std::move(b)); });
//   pooler.start();   // connects and polls once; throws Error(postgres) if it cannot
//   ...
//   pooler.stop();    // joins
//
// Source: pgbouncer's admin console, which speaks only the simple query
// protocol (PQexec). Columns are looked up by name, so a pgbouncer version
// that lacks one leaves that field empty. SHOW STATS counters become deltas
// since the previous poll (µs → ns); SHOW POOLS gauges are summed over the
// users of a database (maxwait: the largest). The admin pseudo-database
// "pgbouncer" is left out.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "sampler/sampler.h"

namespace stallscope::sampler {

struct PoolerSamplerOptions {
  // pgbouncer's admin console: dbname=pgbouncer, a user in admin_users or
  // stats_users.
  std::string conninfo;
  double period_s = 1;  // seconds between polls (--pooler-period)
  // Called on the sampler's thread with a one-line message when the
  // connection is lost ("cannot poll …", conninfo masked) and when it is
  // back; the sampler reconnects with backoff (0.1 s doubling to 5 s) and goes
  // on. Must not throw. May be empty.
  std::function<void(const std::string&)> warn;
};

// The latest poll's figures.
struct PoolerSnapshot {
  std::int64_t polls = 0;        // successful polls so far
  std::int64_t poll_errors = 0;  // failed polls and reconnect attempts
  std::string last_error;        // message of the last failure, "" if none
};

class PoolerSampler {
 public:
  PoolerSampler(PoolerSamplerOptions options, Sink sink);
  ~PoolerSampler();  // stop()s
  PoolerSampler(const PoolerSampler&) = delete;
  PoolerSampler& operator=(const PoolerSampler&) = delete;

  // Connects, polls once (its rows go to the sink, with empty deltas) and
  // starts polling every period_s. Throws Error(usage) for a period ≤ 0 and
  // Error(postgres) "cannot connect to '<masked conninfo>': …" or "cannot
  // poll the pgbouncer admin console '<masked conninfo>': …" (e.g. the
  // conninfo names a PostgreSQL server, not pgbouncer's console).
  void start();
  // Stops and joins, then polls once more (so the rows reach the end of
  // the run; a failure there is only counted). Idempotent.
  void stop();
  PoolerSnapshot latest() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stallscope::sampler
