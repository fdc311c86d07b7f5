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
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/conninfo.h"
#include "common/error.h"
#include "common/host.h"
#include "common/output.h"
#include "common/parse.h"
#include "common/periodic.h"
#include "common/printable.h"
#include "common/sql_secrets.h"
#include "common/stop.h"
#include "common/stop_watchdog.h"
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
namespace {

// The rows produced before the writer exists (the client rows of
// connect()), handed to it once it does (attach); after that every batch
// goes straight to the writer.
class EarlyRows {
 public:
  void submit(schema::Batch b) {
    std::lock_guard lock(mu_);
    if (writer_) {
      writer_->submit(std::move(b));
    } else {
      early_.clients.insert(early_.clients.end(), b.clients.begin(), b.clients.end());
      early_.queries.insert(early_.queries.end(), b.queries.begin(), b.queries.end());
      early_.statements.insert(early_.statements.end(), b.statements.begin(), b.statements.end());
    }
  }
  void attach(schema::Writer& writer) {
    std::lock_guard lock(mu_);
    writer_ = &writer;
    writer.submit(std::move(early_));
  }

 private:
  std::mutex mu_;
  schema::Batch early_;
  schema::Writer* writer_ = nullptr;
};

// -f files as the driver's scripts, unless the file is one SQL command the
// fast path sends as one string: one file, no weight, no meta-command, no
// variable. Error(usage) when the weights are all 0.
void add_script_files(const RunOptions& o, driver::DriverOptions& dopt) {
  std::vector<driver::Script> scripts;
  driver::Variables variables = dopt.variables;
  bool needs_scripts = o.script_files.size() > 1 || o.script_files.front().weight != 1 ||
                       o.scale.has_value() || o.per_statement || o.max_tries != 1;
  for (const auto& f : o.script_files) {
    scripts.push_back(driver::parse_script(f.text, f.path, variables));
    scripts.back().weight = f.weight;
    for (const auto& c : scripts.back().commands) {
      if (c.kind != driver::ScriptCommand::Kind::sql || !c.vars.empty() ||
          c.store != driver::ScriptCommand::Store::none) {
        needs_scripts = true;
      }
    }
    if (scripts.back().sql_commands() != 1) needs_scripts = true;
  }
  std::int64_t total_weight = 0;
  for (const auto& sc : scripts) total_weight += sc.weight;
  if (total_weight == 0) throw_usage("cannot run the scripts: their weights are all 0");
  if (needs_scripts) {
    dopt.scripts = std::move(scripts);
    dopt.variables = std::move(variables);
  } else {
    dopt.sql = scripts.front().commands.front().text.front();  // as lexed: `\;` is ';'
    dopt.sql_origin =
        fmt::format("{}:{}", o.script_files.front().path, scripts.front().commands.front().line);
  }
}

// --random-seed: an integer, "time" (the clock's nanoseconds) or "rand"
// (the default: the system's random source), as pgbench's.
std::uint64_t random_seed(const std::optional<std::string>& given) {
  if (!given || *given == "rand")
    return (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  if (*given == "time") return static_cast<std::uint64_t>(wall_now_ns());
  if (const auto n = common::parse_integer<std::uint64_t>(*given)) return *n;
  if (const auto n = common::parse_int64(*given)) return static_cast<std::uint64_t>(*n);
  throw_usage(fmt::format(
      "cannot use --random-seed '{}': unrecognized random seed option \"{}\" (expected an "
      "integer, time or rand)",
      *given, *given));
}

// The driver's options from run's: the workload, and the scripts (built-in,
// -f, or --sql split for -r) that replace the single SQL string.
driver::DriverOptions driver_options(const RunOptions& o, driver::Protocol protocol) {
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
  dopt.defines = o.defines;
  dopt.max_tries = o.max_tries;
  dopt.verbose_errors = o.verbose_errors;
  dopt.exit_on_abort = o.exit_on_abort;
  dopt.random_seed = random_seed(o.random_seed);
  for (const auto& d : o.defines) dopt.variables.slot(d.first);  // so :NAME substitutes
  if (o.builtin) {
    dopt.scripts.push_back(driver::builtin_script(*o.builtin, dopt.variables));
  } else if (!o.script_files.empty()) {
    add_script_files(o, dopt);
  } else if (o.per_statement || o.max_tries != 1) {
    // -r needs statements: the --sql string is a one-script set (split at
    // its semicolons, as pgbench splits a script).
    dopt.scripts.push_back(driver::parse_script(o.sql, "--sql", dopt.variables));
  }
  return dopt;
}

// The run row of a run (without --delayacct's field).
schema::RunInfo run_info(const RunOptions& o, const driver::DriverOptions& dopt,
                         const driver::Driver& driver) {
  schema::RunInfo info = make_run_info("run", o.argv, o.conninfo, o.sampling.hz);
  info.clients = o.clients;
  info.threads = dopt.threads;
  info.protocol = driver::protocol_name(dopt.protocol);
  info.rate_tps = dopt.rate_tps;
  if (dopt.scripts.empty()) {
    info.sql = mask_sql_secrets(o.sql);
  } else {
    std::string names;
    for (const auto& sc : dopt.scripts) {
      names += fmt::format("{}{}@{}", names.empty() ? "" : ", ", sc.name, sc.weight);
    }
    info.sql = "scripts: " + names;
  }
  info.server_version = driver.server_version();
  return info;
}

// A failed connect's error with what a run connects: -c clients, the ASH
// sampler and the clock-offset probe, so a role's (or the server's)
// connection limit reads as such. `which` names the connection that failed
// when the error does not ("the ASH sampler's connection"); the driver's
// errors name their client.
Error with_connections_needed(const Error& e, const RunOptions& o, std::string_view which = {}) {
  return Error(e.kind(),
               fmt::format("{}{}; a run opens {} connections: {} client{}, the ASH sampler's and "
                           "the clock-offset probe's",
                           e.what(), which.empty() ? "" : fmt::format(" ({})", which),
                           o.clients + 2, o.clients, o.clients == 1 ? "" : "s"),
               e.code(), e.sqlstate());
}

// Whether `e` is a failed connect (common/pg.h's message), not a stop.
bool is_connect_failure(const Error& e) {
  return e.kind() == ErrorKind::postgres &&
         std::string_view(e.what()).starts_with("cannot connect");
}

// Server clock offset: a dedicated connection, probed at the start, every
// --clock-offset-period and at the end. A failure costs only these rows. The
// start and end probes run before the periodic thread starts and after it
// stopped, so the estimator is never used by two threads at once.
class ClockProbes {
 public:
  ClockProbes(const RunOptions& o, schema::Writer& writer) : o_(o), writer_(writer) {}

  // `reconnect`: a lost clock connection is opened again first (the
  // periodic probes, on their own thread: a server restart costs only the
  // estimates until it is back); the end probe only uses a live one.
  void probe(const char* phase, bool reconnect) {
    if (!clock_ && !reconnect) return;
    try {
      if (!clock_) {
        driver::ClockOffsetEstimator fresh(o_.conninfo);
        std::lock_guard lock(clock_mu_);
        clock_.emplace(std::move(fresh));
      }
      schema::Batch b;
      b.clock_offsets.push_back(clock_->estimate(phase));
      writer_.submit(std::move(b));
      if (failing_) common::print_stderr("clock-offset estimates resumed\n");
      failing_ = false;
    } catch (const Error& e) {
      {
        std::lock_guard lock(clock_mu_);
        clock_.reset();
      }
      if (!failing_) {
        common::print_stderr("warning: no clock-offset estimate ({}); retrying every {:g} s\n",
                             e.what(), o_.clock_offset_period_s);
      }
      failing_ = true;
    }
  }
  // From another thread: fails a probe blocked on a server that stopped
  // answering.
  void abort() noexcept {
    std::lock_guard lock(clock_mu_);
    if (clock_) clock_->abort();
  }

 private:
  const RunOptions& o_;
  schema::Writer& writer_;
  std::mutex clock_mu_;  // clock_ is replaced under it; abort() reads it under it
  std::optional<driver::ClockOffsetEstimator> clock_;
  bool failing_ = false;  // warned; cleared when an estimate works again
};

// The driver's part of a progress line: tps and latency over successful
// transactions, as pgbench's progress.
std::string driver_progress(driver::Driver& driver, const RunOptions& o) {
  const auto s = driver.take_interval_stats();
  const double tps = s.interval_ns > 0 ? static_cast<double>(s.queries - s.errors) *
                                             common::kNsPerSDouble / s.interval_ns
                                       : 0;
  std::string out = fmt::format("{:.1f} tps, lat {:.3f} ms mean, {:.3f} ms p99", tps,
                                s.mean_latency_ms, s.p99_latency_ms);
  if (s.mean_lag_ms) out += fmt::format(", lag {:.3f} ms", *s.mean_lag_ms);
  if (o.skip_late) out += fmt::format(", {} skipped", s.skipped);
  if (o.latency_limit_ms) out += fmt::format(", {} late", s.late);
  out += fmt::format(", {} failed", s.errors);
  if (s.reconnecting > 0) out += fmt::format(", {} reconnecting", s.reconnecting);
  if (s.connect_failures > 0) {
    out += fmt::format(", {} {} failed", s.connect_failures,
                       o.connect_per_transaction ? "connects" : "reconnect attempts");
  }
  return out;
}

// How the run ended: the run row's status and reason; `write_failure` when
// a commit of the run file failed (status "failed"; the run exits 1).
struct RunEnd {
  std::string status = "complete";
  std::string reason;
  std::optional<schema::WriteFailure> write_failure;
};

// The end-of-run summary on stdout, pgbench's lines where it has them;
// `file_deleted`: the run file was deleted while the run wrote it.
void print_summary(const RunOptions& o, const driver::DriverOptions& dopt,
                   const driver::Driver& driver, const RunEnd& end, bool file_deleted) {
  const auto s = driver.summary();
  fmt::print("run file: {}{}\n", common::printable(o.output_path),
             file_deleted ? " (deleted during the run: nothing kept)" : "");
  fmt::print("protocol: {}, clients: {}, threads: {}\n", driver::protocol_name(dopt.protocol),
             o.clients, dopt.threads);
  fmt::print("transactions: {} ({} failed) in {:.3f} s{}\n", s.queries, s.errors,
             static_cast<double>(s.elapsed_ns) / common::kNsPerSDouble,
             end.status == "interrupted" ? fmt::format(" — interrupted by {}", end.reason)
             : end.status == "failed"    ? fmt::format(" — {}", end.reason)
                                         : std::string());
  // Not transactions (driver/driver.h, Summary): counted apart.
  if (s.connect_failures > 0) {
    fmt::print("{} failed: {} (query rows with SQLSTATE 08001, not counted as transactions)\n",
               o.connect_per_transaction ? "connects" : "reconnect attempts", s.connect_failures);
  }
  if (s.unfinished > 0) {
    fmt::print("transactions cut short at the end: {} (in query_unfinished, not counted)\n",
               s.unfinished);
  }
  if (s.queries > s.errors) {
    fmt::print("latency average = {:.3f} ms, p99 = {:.3f} ms\n", s.mean_latency_ms,
               s.p99_latency_ms);
  } else {
    // Latency counts successful transactions (as pgbench's): none, no figure.
    fmt::print("latency: no transaction succeeded\n");
  }
  if (s.mean_lag_ms) {
    fmt::print("rate limit schedule lag: avg {:.3f} (max {:.3f}) ms\n", *s.mean_lag_ms,
               s.max_lag_ms.value_or(0));
  }
  if (o.skip_late) fmt::print("transactions skipped: {}\n", s.skipped);
  if (o.latency_limit_ms) {
    fmt::print("transactions above the {:.1f} ms latency limit: {}\n", *o.latency_limit_ms, s.late);
  }
  if (o.failures_detailed) {
    fmt::print("failed transactions by kind: serialization {}, deadlock {}, other {}\n",
               s.serialization_failures, s.deadlock_failures,
               s.errors - s.serialization_failures - s.deadlock_failures);
  }
  if (o.max_tries != 1) {
    // As pgbench: tried more than once, whatever the outcome.
    fmt::print(
        "transactions retried: {} ({:.3f} %), total retries: {} (in query_retry)\n", s.retried,
        s.queries > 0 ? 100.0 * static_cast<double>(s.retried) / static_cast<double>(s.queries)
                      : 0.0,
        s.retries);
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
      fmt::print("  {:>10.3f}  {:>9}  {}\n", st.mean_latency_ms, st.executions,
                 common::printable(fold_lines(st.sql)));
    }
  }
  if (!file_deleted) fmt::print("next: stallscope explain {}\n", common::printable(o.output_path));
}

// Runs the driver with the host and ASH samplers, the clock-offset probes
// and the progress lines until the run ends (-T, -t, SIGINT/SIGTERM, a
// failed commit of the run file), stops them all (`pooler` too) and closes
// the run file; how the run ended. On a
// failure the run file is closed as failed, and removed when no transaction
// ran. A failed commit stops the driver at once (writer.failure_token());
// the run is then closed by close_after_write_failure (tools/session.h).
RunEnd drive_and_sample(const RunOptions& o, driver::Driver& driver, schema::Writer& writer,
                        std::optional<sampler::PoolerSampler>& pooler, std::int64_t start_ns) {
  auto writer_sink = [&writer](schema::Batch b) { writer.submit(std::move(b)); };
  install_stop_handlers();
  // The driver polls this token: the global flag the signal handlers set
  // (common/stop.h: a signal handler may only store to a lock-free atomic,
  // which is all that a StopToken reads), or the writer's, set at its first
  // failed commit.
  const StopToken stop = either_of(global_stop_token(), writer.failure_token());
  ClockProbes clock(o, writer);
  clock.probe("start", true);
  PeriodicThread clock_thread;
  const auto clock_period_ns =
      static_cast<std::int64_t>(o.clock_offset_period_s * common::kNsPerSDouble);
  clock_thread.start(
      kClockThreadName, clock_period_ns, [&] { clock.probe("periodic", true); }, clock_period_ns);
  sampler::HostSampler host_sampler({.hz = o.sampling.hz}, writer_sink);
  sampler::AshSampler ash_sampler({.conninfo = o.conninfo, .hz = o.sampling.hz}, writer_sink);
  RunEnd end;
  std::int64_t driven_end_ns = 0;
  try {
    host_sampler.start();
    try {
      ash_sampler.start();
    } catch (const Error& e) {
      if (!is_connect_failure(e)) throw;
      throw with_connections_needed(e, o, "the ASH sampler's connection");
    }
    try {
      ProgressPrinter progress(
          o.sampling.progress_s, [&driver, &o] { return driver_progress(driver, o); }, host_sampler,
          &ash_sampler, o.progress_timestamp);
      driver.run(stop);
    } catch (const Error& e) {
      if (!is_connect_failure(e)) throw;
      throw with_connections_needed(e, o);
    }
    driven_end_ns = wall_now_ns();
    if (const auto lost = driver.server_lost()) {
      // -t: every client gave up reconnecting (driver/driver.h).
      end.status = "failed";
      end.reason = "server lost: " + *lost;
      common::print_stderr("stallscope run: {}\n", end.reason);
    } else if (stop_requested()) {
      end.status = "interrupted";
      end.reason = stop_signal_name();
    } else if (driver.summary().ended_on_failure) {
      end.status = "interrupted";
      end.reason = "--exit-on-abort: a transaction failed";
    } else {
      end.reason = o.duration_s ? "duration reached" : "transactions done";
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
  {
    // A probe blocked on a server that stopped answering is failed after
    // the grace, so the run still ends (common/stop_watchdog.h).
    StopWatchdog watchdog(sampler::kSamplerStopGraceNs, [&clock] { clock.abort(); });
    clock_thread.stop();
    if (pooler) pooler->stop();  // its last poll covers the end of the queries
    clock.probe("end", false);
  }
  warn_if_sampler_lagged(host_sampler, o.sampling.hz,
                         static_cast<double>(wall_now_ns() - start_ns) / common::kNsPerSDouble);
  host_sampler.stop();
  ash_sampler.stop();
  writer.drain();  // a commit that fails now still makes the run 'failed'
  if (auto failure = writer.failure()) {
    end.status = "failed";
    end.reason = schema::end_reason(*failure, start_ns);
    close_after_write_failure(
        writer, *failure, "run", o.output_path, start_ns, wall_now_ns(),
        failure->failed_ns <= driven_end_ns ? "stopped driving" : "the run had ended");
    end.write_failure = std::move(failure);
    return end;
  }
  writer.close(wall_now_ns(), end.status, end.reason);
  return end;
}

}  // namespace

int run_command(const RunOptions& o) {
  check_conninfo(o.conninfo);
  if (o.sampling.pooler_admin) check_conninfo(*o.sampling.pooler_admin);
  const auto protocol = driver::parse_protocol(o.protocol);
  EarlyRows early;
  const driver::DriverOptions dopt = driver_options(o, protocol);
  // Before the file exists: a signal from here on ends the run cleanly, and
  // a connect in progress too (pg::connect polls the flag); so does a
  // reader of stdout or stderr that went away.
  install_stop_handlers();
  const BrokenPipeWatch broken_pipe;
  std::vector<std::string> inputs;
  for (const auto& f : o.script_files) inputs.push_back(f.path);
  common::refuse_output_that_is_an_input(o.output_path, inputs);
  // The run file is created once the scripts parsed: bad input leaves none.
  RunFileWatch file_watch;  // destroyed after the store and writer (tools/session.h)
  auto store = schema::Store::create(o.output_path);
  file_watch.watch(o.output_path);
  driver::Driver driver(dopt, [&early](schema::Batch b) { early.submit(std::move(b)); });
  try {
    driver.connect();
  } catch (const Error& e) {
    // Nothing was recorded yet: do not leave a file that blocks the next -o.
    discard_run_file(store, o.output_path);
    if (!is_connect_failure(e)) throw;
    throw with_connections_needed(e, o);
  } catch (...) {
    discard_run_file(store, o.output_path);
    throw;
  }

  schema::RunInfo info = run_info(o, dopt, driver);
  DelayacctGuard delayacct;  // restores kernel.task_delayacct when run ends
  if (o.sampling.delayacct) {
    delayacct = DelayacctGuard::enable("run");
    info.delayacct_set = delayacct.set_by_us() ? 1 : 0;
  }
  try {
    store.begin_run(info);
  } catch (...) {
    // E.g. a disk that filled since the file was created: leave no file.
    discard_run_file(store, o.output_path);
    throw;
  }

  schema::Writer writer(std::move(store));
  early.attach(writer);
  auto writer_sink = [&writer](schema::Batch b) { writer.submit(std::move(b)); };
  // --pooler-admin: an admin console that cannot be polled fails the run
  // before anything was measured, and leaves no file.
  std::optional<sampler::PoolerSampler> pooler;
  if (o.sampling.pooler_admin) {
    pooler.emplace(pooler_options(*o.sampling.pooler_admin, o.sampling.pooler_period_s),
                   writer_sink);
    try {
      pooler->start();
    } catch (const Error& e) {
      writer.close(wall_now_ns(), "failed", e.what());
      remove_run_file(o.output_path);
      throw;
    }
  }

  const RunEnd end = drive_and_sample(o, driver, writer, pooler, info.start_ns);
  const bool deleted = file_watch.deleted();
  print_summary(o, dopt, driver, end, deleted);
  if (deleted) {
    fmt::print(stderr,
               "stallscope run: {}: the run file was deleted while the run wrote it: nothing it "
               "recorded is kept\n",
               common::printable(o.output_path));
    return 1;
  }
  if (end.write_failure || end.status == "failed") return 1;
  if (driver.summary().ended_on_failure) {
    fmt::print(stderr,
               "stallscope run: the run was aborted at its first failed transaction "
               "(--exit-on-abort): `stallscope explain {}` names the error\n",
               common::printable(o.output_path));
    return 1;
  }
  // Every transaction of a run that ended as asked failed: it measured
  // nothing but its errors. The file keeps them (explain's `errors` finding
  // names the SQLSTATEs). A run ended by a signal exits 0 whatever it did.
  if (const auto s = driver.summary();
      end.status == "complete" && s.queries > 0 && s.errors == s.queries) {
    fmt::print(stderr,
               "stallscope run: every transaction failed ({}): `stallscope explain {}` names the "
               "errors\n",
               s.errors, common::printable(o.output_path));
    return 1;
  }
  return 0;
}

}  // namespace stallscope::tools
