// `stallscope run`: the driver, the host and ASH samplers, the pooler sampler
// (--pooler-admin) and the server clock-offset probes, all feeding one
// writer of the run file.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/conninfo.h"
#include "common/error.h"
#include "common/host.h"
#include "common/periodic.h"
#include "common/stop.h"
#include "common/thread_name.h"
#include "common/units.h"
#include "driver/clock_offset.h"
#include "driver/driver.h"
#include "sampler/sampler.h"
#include "schema/store.h"
#include "schema/writer.h"
#include "tools/commands.h"
#include "tools/delayacct.h"
#include "tools/session.h"

namespace stallscope::tools {
int run_command(const RunOptions& o) {
  check_conninfo(o.conninfo);
  if (o.pooler_admin) check_conninfo(*o.pooler_admin);
  const auto protocol = driver::parse_protocol(o.protocol);

  // Rows produced before the writer exists (the client rows of connect()).
  std::mutex early_mu;
  schema::Batch early;
  schema::Writer* writer_ptr = nullptr;
  auto sink = [&](schema::Batch b) {
    std::lock_guard lock(early_mu);
    if (writer_ptr) {
      writer_ptr->submit(std::move(b));
    } else {
      early.clients.insert(early.clients.end(), b.clients.begin(), b.clients.end());
      early.queries.insert(early.queries.end(), b.queries.begin(), b.queries.end());
      early.statements.insert(early.statements.end(), b.statements.begin(), b.statements.end());
    }
  };

  driver::DriverOptions dopt;
  dopt.conninfo = o.conninfo;
  dopt.clients = o.clients;
  dopt.threads = std::min(o.threads, o.clients);
  dopt.duration_s = o.duration_s;
  dopt.queries_per_client = o.queries_per_client;
  dopt.sql = o.sql;
  dopt.protocol = protocol;
  dopt.connect_per_transaction = o.connect_per_transaction;
  dopt.rate_tps = o.rate_tps;
  dopt.latency_limit_ms = o.latency_limit_ms;
  dopt.skip_late = o.skip_late;
  dopt.scale = o.scale;
  dopt.pipeline = o.pipeline;
  dopt.per_statement = o.per_statement;
  // Scripts replace the single SQL string unless the file is plain SQL the
  // fast path runs as is: one file, no weight, no meta-command, and (outside
  // simple mode) a single SQL command.
  dopt.defines = o.defines;
  for (const auto& d : o.defines) dopt.variables.slot(d.first);  // so :NAME substitutes
  if (o.builtin) {
    dopt.scripts.push_back(driver::builtin_script(*o.builtin, dopt.variables));
  } else if (!o.script_files.empty()) {
    std::vector<driver::Script> scripts;
    driver::Variables variables = dopt.variables;
    bool needs_scripts = o.script_files.size() > 1 || o.script_files.front().weight != 1 ||
                         o.scale.has_value() || o.per_statement;
    for (const auto& f : o.script_files) {
      scripts.push_back(driver::parse_script(f.text, f.path, variables));
      scripts.back().weight = f.weight;
      for (const auto& c : scripts.back().commands) {
        if (c.kind != driver::ScriptCommand::Kind::sql || !c.vars.empty()) needs_scripts = true;
      }
      if (protocol != driver::Protocol::simple && scripts.back().sql_commands() > 1) {
        needs_scripts = true;
      }
    }
    std::int64_t total_weight = 0;
    for (const auto& sc : scripts) total_weight += sc.weight;
    if (total_weight == 0) throw_usage("cannot run the scripts: their weights are all 0");
    if (needs_scripts) {
      dopt.scripts = std::move(scripts);
      dopt.variables = std::move(variables);
    }
  } else if (o.per_statement) {
    // -r needs statements: the --sql string is a one-script set (split at
    // its semicolons, as pgbench splits a script).
    dopt.scripts.push_back(driver::parse_script(o.sql, "--sql", dopt.variables));
  }
  // The run file is created once the scripts parsed: bad input leaves none.
  auto store = schema::Store::create(o.output_path);
  driver::Driver driver(dopt, sink);
  try {
    driver.connect();
  } catch (...) {
    // Nothing was recorded yet: do not leave a file that blocks the next -o.
    store = schema::Store::create(":memory:");
    remove_run_file(o.output_path);
    throw;
  }

  schema::RunInfo info = make_run_info("run", o.argv, o.conninfo, o.hz);
  info.clients = o.clients;
  info.threads = dopt.threads;
  info.protocol = driver::protocol_name(protocol);
  if (dopt.scripts.empty()) {
    info.sql = o.sql;
  } else {
    std::string names;
    for (const auto& sc : dopt.scripts) {
      names += fmt::format("{}{}@{}", names.empty() ? "" : ", ", sc.name, sc.weight);
    }
    info.sql = "scripts: " + names;
  }
  info.server_version = driver.server_version();
  DelayacctGuard delayacct;  // restores kernel.task_delayacct when run ends
  if (o.delayacct) {
    delayacct = DelayacctGuard::enable("run");
    info.delayacct_set = delayacct.set_by_us() ? 1 : 0;
  }
  store.begin_run(info);

  schema::Writer writer(std::move(store));
  {
    std::lock_guard lock(early_mu);
    writer_ptr = &writer;
    writer.submit(std::move(early));
  }
  auto writer_sink = [&writer](schema::Batch b) { writer.submit(std::move(b)); };
  // --pooler-admin: an admin console that cannot be polled fails the run
  // before anything was measured, and leaves no file.
  std::optional<sampler::PoolerSampler> pooler;
  if (o.pooler_admin) {
    pooler.emplace(pooler_options(*o.pooler_admin, o.pooler_period_s), writer_sink);
    try {
      pooler->start();
    } catch (const Error& e) {
      writer.close(wall_now_ns(), "failed", e.what());
      remove_run_file(o.output_path);
      throw;
    }
  }

  install_stop_handlers();
  // The driver polls this token; its state is the global flag the handlers
  // set (common/stop.h: a signal handler may only store to a lock-free
  // atomic, which is all that a StopToken reads).
  const StopToken stop = global_stop_token();
  // Server clock offset: a dedicated connection, at the start, every
  // --clock-offset-period and at the end. A failure costs only these rows.
  // The start and end probes run before the periodic thread starts and after
  // it stopped, so the estimator is never used by two threads at once.
  std::optional<driver::ClockOffsetEstimator> clock;
  bool clock_failing = false;  // warned; cleared when an estimate works again
  // `reconnect`: a lost clock connection is opened again first (the
  // periodic probes, on their own thread: a server restart costs only the
  // estimates until it is back); the end probe only uses a live one.
  auto clock_probe = [&](const char* phase, bool reconnect) {
    if (!clock && !reconnect) return;
    try {
      if (!clock) clock.emplace(o.conninfo);
      schema::Batch b;
      b.clock_offsets.push_back(clock->estimate(phase));
      writer.submit(std::move(b));
      if (clock_failing) fmt::print(stderr, "clock-offset estimates resumed\n");
      clock_failing = false;
    } catch (const Error& e) {
      clock.reset();
      if (!clock_failing) {
        fmt::print(stderr, "warning: no clock-offset estimate ({}); retrying every {:g} s\n",
                   e.what(), o.clock_offset_period_s);
      }
      clock_failing = true;
    }
  };
  clock_probe("start", true);
  PeriodicThread clock_thread;
  const auto clock_period_ns =
      static_cast<std::int64_t>(o.clock_offset_period_s * common::kNsPerSDouble);
  clock_thread.start(
      kClockThreadName, clock_period_ns, [&] { clock_probe("periodic", true); }, clock_period_ns);
  sampler::HostSampler host_sampler({.hz = o.hz}, writer_sink);
  sampler::AshSampler ash_sampler({.conninfo = o.conninfo, .hz = o.hz}, writer_sink);
  std::string status = "complete";
  std::string reason;
  try {
    host_sampler.start();
    ash_sampler.start();
    {
      auto driver_part = [&driver, &o] {
        const auto s = driver.take_interval_stats();
        // tps and latency over successful transactions, as pgbench's progress.
        const double tps = s.interval_ns > 0 ? static_cast<double>(s.queries - s.errors) *
                                                   common::kNsPerSDouble / s.interval_ns
                                             : 0;
        std::string out = fmt::format("{:.1f} tps, lat {:.3f} ms mean, {:.3f} ms p99", tps,
                                      s.mean_latency_ms, s.p99_latency_ms);
        if (s.mean_lag_ms) out += fmt::format(", lag {:.3f} ms", *s.mean_lag_ms);
        if (o.skip_late) out += fmt::format(", {} skipped", s.skipped);
        if (o.latency_limit_ms) out += fmt::format(", {} late", s.late);
        return out + fmt::format(", {} failed", s.errors);
      };
      ProgressPrinter progress(o.progress_s, driver_part, host_sampler, &ash_sampler);
      driver.run(stop);
    }
    if (stop.stop_requested()) {
      status = "interrupted";
      reason = stop_signal() == SIGTERM ? "SIGTERM" : "SIGINT";
    } else {
      reason = o.duration_s ? "duration reached" : "transactions done";
    }
  } catch (const std::exception& e) {
    clock_thread.stop();
    if (pooler) pooler->stop();
    host_sampler.stop();
    ash_sampler.stop();
    writer.close(wall_now_ns(), "failed", e.what());
    // The driver failed before any transaction (a client's connection was
    // refused in run()): nothing was measured, so no file blocks the next -o.
    if (driver.summary().queries == 0) remove_run_file(o.output_path);
    throw;
  }
  clock_thread.stop();
  if (pooler) pooler->stop();  // its last poll covers the end of the queries
  clock_probe("end", false);
  warn_if_sampler_lagged(
      host_sampler, o.hz,
      static_cast<double>(wall_now_ns() - info.start_ns) / common::kNsPerSDouble);
  host_sampler.stop();
  ash_sampler.stop();
  writer.close(wall_now_ns(), status, reason);

  const auto s = driver.summary();
  fmt::print("run file: {}\n", o.output_path);
  fmt::print("protocol: {}, clients: {}, threads: {}\n", driver::protocol_name(protocol), o.clients,
             dopt.threads);
  fmt::print("transactions: {} ({} failed) in {:.3f} s{}\n", s.queries, s.errors,
             static_cast<double>(s.elapsed_ns) / common::kNsPerSDouble,
             status == "interrupted" ? fmt::format(" — interrupted by {}", reason) : "");
  fmt::print("latency average = {:.3f} ms, p99 = {:.3f} ms\n", s.mean_latency_ms, s.p99_latency_ms);
  if (s.mean_lag_ms) {
    fmt::print("rate limit schedule lag: avg {:.3f} (max {:.3f}) ms\n", *s.mean_lag_ms,
               s.max_lag_ms.value_or(0));
  }
  if (o.skip_late) fmt::print("transactions skipped: {}\n", s.skipped);
  if (o.latency_limit_ms) {
    fmt::print("transactions above the {:.1f} ms latency limit: {}\n", *o.latency_limit_ms, s.late);
  }
  if (o.connect_per_transaction) fmt::print("connections opened: {}\n", s.connections);
  if (o.pipeline > 0)
    fmt::print("pipeline: {} transactions in flight per connection\n", o.pipeline);
  // As pgbench: failed transactions are not in tps or the latency figures.
  fmt::print(
      "tps = {:.1f}{}\n", s.tps,
      s.errors > 0 ? fmt::format(" (the {} failed transactions not counted)", s.errors) : "");
  if (o.per_statement) {
    // As pgbench -r: mean latency per SQL command, by script.
    fmt::print("statement latencies in milliseconds (mean over executions):\n");
    std::string script;
    for (const auto& st : s.statements) {
      if (st.script != script) {
        script = st.script;
        fmt::print("  {}:\n", script);
      }
      fmt::print("  {:>10.3f}  {:>9}  {}\n", st.mean_latency_ms, st.executions, fold_lines(st.sql));
    }
  }
  fmt::print("next: stallscope explain {}\n", o.output_path);
  return 0;
}

}  // namespace stallscope::tools
