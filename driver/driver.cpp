// Driver (driver/driver.h): checks the options, opens the clients'
// connections on the driver threads, runs one Worker (driver/worker.h) per
// thread behind a gate, and sums the threads' figures for progress lines and
// the summary.
#include "driver/driver.h"

#include <libpq-fe.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/latency_histogram.h"
#include "common/pg.h"
#include "common/thread_name.h"
#include "common/units.h"
#include "driver/client.h"
#include "driver/connection.h"
#include "driver/options.h"
#include "driver/stats.h"
#include "driver/worker.h"

namespace stallscope::driver {
namespace {

// The driver threads' timer slack under -R (see thread_main).
constexpr unsigned long kRateTimerSlackNs = 1'000;

}  // namespace

struct Driver::Impl {
  DriverOptions options;
  Sink sink;
  int threads = 1;
  std::vector<detail::Client> clients;
  detail::ThreadStatsList stats;
  std::string server_version;
  std::optional<std::string> server_lost;  // set by run() when every client gave up
  // Ends a connect in progress: connect()'s is SIGINT/SIGTERM's, run()'s its `stop`.
  StopToken connect_stop = global_stop_token();
  bool connected = false;
  bool ran = false;
  std::atomic<bool> abort{false};

  mutable std::mutex interval_mu;
  common::LatencyHistogram interval_previous;
  std::int64_t interval_previous_errors = 0;
  std::int64_t interval_start_mono_ns = 0;
  detail::Counters interval_previous_counters;
  std::int64_t initial_connections = 0;  // opened by connect()
  // Driving: from the gate's opening (all clients connected, -T starts) to
  // the return of the last driver thread; 0 until each happened.
  std::atomic<std::int64_t> drive_start_mono_ns{0};
  std::atomic<std::int64_t> drive_end_mono_ns{0};
  // -r: per statement id, over all threads, after run().
  std::vector<std::int64_t> statement_sum_ns, statement_count;

  // run()'s client rows, filled by the threads as they connect.
  schema::Batch connect_batch;
  std::mutex connect_batch_mu;

  // The driver threads start in run(): each opens its own clients'
  // connections and then drives them, as pgbench's threads do, so every
  // backend first talks to the thread that will drive it, right before it
  // does, and the scheduler tends to keep the two on one CPU. Measured at
  // -c 8 on 2 CPUs: connected from one thread, or connected before the
  // samplers and the clock-offset connection start, most runs drive their
  // backends across CPUs, each query then waking a task on the other CPU,
  // and run up to 25 % slower. Between connecting and driving they wait at
  // the gate: open once all are connected, cancelled on a failure. run()
  // joins them on every path.
  enum class Gate { closed, open, cancelled };
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  Gate gate = Gate::closed;
  int threads_connected = 0;
  std::atomic<bool> connect_failed{false};
  std::vector<std::exception_ptr> failures;              // per thread
  std::vector<std::unique_ptr<detail::Worker>> workers;  // made by run() before the gate opens
  std::vector<std::jthread> running;                     // last: joined before the rest goes

  // Opens client i's connection, delivers its row into `batch`.
  void open_client(int i, schema::Batch& batch, std::mutex& batch_mu);
  // A driver thread: opens its clients' connections, waits at the gate,
  // runs its Worker.
  void thread_main(int t, schema::Batch& batch, std::mutex& batch_mu);
  // run(): starts the threads and waits until their clients are connected;
  // rethrows a thread's connect failure.
  void connect_clients();
  void make_workers(StopToken stop);  // one per thread, with -T's deadline from now
  void sum_statements();              // -r: the workers' per-statement totals
  std::vector<StatementStats> statement_stats() const;  // -r: summary().statements
  void release(Gate to) {
    {
      std::lock_guard lock(gate_mu);
      if (gate == Gate::closed) gate = to;
    }
    gate_cv.notify_all();
  }
  // Driving so far: start → end, or → now while the threads drive; 0
  // before they start.
  std::int64_t driven_ns() const {
    const std::int64_t start = drive_start_mono_ns.load();
    if (start == 0) return 0;
    const std::int64_t end = drive_end_mono_ns.load();
    return (end != 0 ? end : mono_now_ns()) - start;
  }
  // The threads' counters so far (connections include connect()'s).
  detail::Counters counters() const {
    detail::Counters c = detail::sum_counters(stats);
    c.connections += initial_connections;
    return c;
  }
};

Driver::Driver(DriverOptions options, Sink sink) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->sink = std::move(sink);
  impl_->threads = std::max(1, std::min(impl_->options.threads, impl_->options.clients));
  for (int t = 0; t < impl_->threads; ++t) {
    impl_->stats.push_back(std::make_unique<detail::ThreadStats>());
  }
  impl_->interval_start_mono_ns = mono_now_ns();
}

Driver::~Driver() = default;

void Driver::connect() {
  const DriverOptions& o = impl_->options;
  if (impl_->connected) throw Error(ErrorKind::runtime, "cannot connect the driver twice");
  detail::check_options(o);

  impl_->clients = std::vector<detail::Client>(static_cast<std::size_t>(o.clients));
  for (int i = 0; i < o.clients; ++i) {
    detail::Client& c = impl_->clients[static_cast<std::size_t>(i)];
    c.client_id = i;
    c.thread = i % impl_->threads;  // round-robin, as run() assigns them
  }
  // Client 0 here, for the checks (SQL, scale, server version): a bad
  // conninfo or SQL fails before anything runs. The others connect in run().
  schema::Batch batch;
  std::mutex batch_mu;
  try {
    impl_->open_client(0, batch, batch_mu);
  } catch (...) {
    impl_->clients.clear();
    throw;
  }
  if (o.per_statement) {
    const auto ids = detail::number_statements(o.scripts);
    for (std::size_t s = 0; s < o.scripts.size(); ++s) {
      for (std::size_t k = 0; k < o.scripts[s].commands.size(); ++k) {
        if (ids[s][k] < 0) continue;
        const ScriptCommand& cmd = o.scripts[s].commands[k];
        batch.statements.push_back(schema::StatementRow{.statement = ids[s][k],
                                                        .script = o.scripts[s].name,
                                                        .line = cmd.line,
                                                        .sql = source_text(cmd, o.variables)});
      }
    }
  }
  impl_->connected = true;
  impl_->sink(std::move(batch));
}

void Driver::Impl::open_client(int i, schema::Batch& batch, std::mutex& batch_mu) {
  const DriverOptions& o = options;
  detail::Client& c = clients[static_cast<std::size_t>(i)];
  if (o.connect_per_transaction && i > 0) return;  // -C: they connect per transaction
  std::string application_name = fmt::format("stallscope/{}", i);
  std::int64_t begin_ns = mono_now_ns();
  try {
    c.conn = pg::connect(o.conninfo, application_name, {.stop = connect_stop});
  } catch (const Error& e) {
    // Which of the clients (a role's or the server's connection limit
    // refuses a later one).
    throw Error(e.kind(), fmt::format("{} (client {} of {})", e.what(), i + 1, o.clients), e.code(),
                e.sqlstate());
  }
  std::int64_t latency_ns = mono_now_ns() - begin_ns;
  std::int64_t connected_wall_ns = wall_now_ns();
  PGconn* conn = c.conn.get();
  PQsetNoticeProcessor(conn, detail::discard_notice, nullptr);
  if (i == 0) {
    const char* version = PQparameterStatus(conn, "server_version");
    server_version = version ? version : "";
    if (o.protocol != Protocol::simple && o.scripts.empty()) {
      detail::check_sql(conn, o.sql, o.protocol);
    }
    if (!o.scripts.empty()) options.scale = detail::script_scale(conn, o);
  }
  if (o.protocol == Protocol::prepared) detail::prepare_statements(conn, o);
  if (o.pipeline > 0 && !PQenterPipelineMode(conn)) {
    throw Error(ErrorKind::postgres,
                fmt::format("cannot enter pipeline mode: {}", pg::error_message(conn)));
  }
  c.backend_pid = PQbackendPID(conn);
  const auto local = detail::local_address(conn);
  std::lock_guard lock(batch_mu);
  ++initial_connections;
  batch.clients.push_back(schema::ClientRow{
      .client_id = i,
      .connection = 0,
      .thread = c.thread,
      .backend_pid = c.backend_pid,
      .connect_ns = connected_wall_ns,
      .connect_latency_ns = latency_ns,
      .application_name = std::move(application_name),
      .local_addr = local ? std::optional(local->addr) : std::nullopt,
      .local_port = local ? std::optional(local->port) : std::nullopt,
  });
  // -C: client 0's connection served the checks; transactions connect anew.
  if (o.connect_per_transaction) c.conn.reset();
}

void Driver::Impl::thread_main(int t, schema::Batch& batch, std::mutex& batch_mu) {
  set_thread_name((kDriverThreadPrefix + std::to_string(t)).c_str());
  // -R: the kernel may delay a timed wake-up by the thread's timer slack
  // (50 µs by default), which adds to every schedule lag; 1 µs keeps the
  // wake-up at the scheduled time (tools/bench rate measures it).
  if (options.rate_tps) prctl(PR_SET_TIMERSLACK, kRateTimerSlackNs, 0, 0, 0);
  const auto ti = static_cast<std::size_t>(t);
  try {
    for (int i = t == 0 ? threads : t; i < options.clients && !connect_failed.load();
         i += threads) {
      open_client(i, batch, batch_mu);
    }
  } catch (...) {
    failures[ti] = std::current_exception();
    connect_failed.store(true);
  }
  std::unique_lock lock(gate_mu);
  ++threads_connected;
  gate_cv.notify_all();
  gate_cv.wait(lock, [this] { return gate != Gate::closed; });
  if (gate == Gate::cancelled) return;
  lock.unlock();
  try {
    workers[ti]->run();
  } catch (...) {
    failures[ti] = std::current_exception();
    abort.store(true);
  }
}

void Driver::run(StopToken stop) {
  if (!impl_->connected) {
    throw Error(ErrorKind::runtime, "cannot run the driver: connect() was not called");
  }
  if (impl_->ran) throw Error(ErrorKind::runtime, "cannot run the driver twice");
  impl_->ran = true;

  Impl* impl = impl_.get();
  impl->connect_stop = stop;
  try {
    impl->connect_clients();
    impl->make_workers(stop);
  } catch (...) {
    impl->release(Impl::Gate::cancelled);
    impl->running.clear();  // joins; the connections close with the Driver
    throw;
  }
  impl->release(Impl::Gate::open);
  impl->running.clear();  // joins
  impl->drive_end_mono_ns.store(mono_now_ns());
  const bool all_lost =
      !impl->clients.empty() &&
      std::all_of(impl->clients.begin(), impl->clients.end(),
                  [](const detail::Client& c) { return c.lost_error.has_value(); });
  if (all_lost) impl->server_lost = impl->clients.back().lost_error;
  for (auto& c : impl->clients) c.conn.reset();
  if (impl->options.per_statement) impl->sum_statements();
  for (auto& f : impl->failures) {
    if (f) std::rethrow_exception(f);
  }
}

void Driver::Impl::connect_clients() {
  // The threads open their clients' connections (client 0's is open); the
  // gate opens once all are, so no query is sent before that.
  failures.assign(static_cast<std::size_t>(threads), nullptr);
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([this, t] { thread_main(t, connect_batch, connect_batch_mu); });
  }
  {
    std::unique_lock lock(gate_mu);
    gate_cv.wait(lock, [this] { return threads_connected == threads; });
  }
  for (auto& f : failures) {
    if (f) std::rethrow_exception(f);
  }
  auto& rows = connect_batch.clients;
  std::sort(rows.begin(), rows.end(),
            [](const auto& x, const auto& y) { return x.client_id < y.client_id; });
  if (!rows.empty()) sink(std::move(connect_batch));
}

void Driver::Impl::make_workers(StopToken stop) {
  std::int64_t start_ns = mono_now_ns();
  drive_start_mono_ns.store(start_ns);
  {
    std::lock_guard lock(interval_mu);
    interval_start_mono_ns = start_ns;
  }
  std::optional<std::int64_t> deadline_ns;
  if (options.duration_s) {
    deadline_ns = start_ns + static_cast<std::int64_t>(*options.duration_s * common::kNsPerSDouble);
  }
  std::vector<std::vector<detail::Client*>> assigned(static_cast<std::size_t>(threads));
  for (auto& c : clients) assigned[static_cast<std::size_t>(c.thread)].push_back(&c);
  for (int t = 0; t < threads; ++t) {
    const auto ti = static_cast<std::size_t>(t);
    workers.push_back(std::make_unique<detail::Worker>(
        options, sink, *stats[ti], std::move(assigned[ti]), deadline_ns, stop, abort, threads));
  }
}

void Driver::Impl::sum_statements() {
  for (const auto& w : workers) {
    statement_sum_ns.resize(w->statement_sum_ns.size());
    statement_count.resize(w->statement_count.size());
    for (std::size_t i = 0; i < w->statement_sum_ns.size(); ++i) {
      statement_sum_ns[i] += w->statement_sum_ns[i];
      statement_count[i] += w->statement_count[i];
    }
  }
}

std::vector<StatementStats> Driver::Impl::statement_stats() const {
  std::vector<StatementStats> out;
  const auto& scripts = options.scripts;
  const auto ids = detail::number_statements(scripts);
  for (std::size_t s = 0; s < scripts.size(); ++s) {
    for (std::size_t k = 0; k < scripts[s].commands.size(); ++k) {
      auto id = static_cast<std::size_t>(ids[s][k]);
      if (ids[s][k] < 0) continue;
      const ScriptCommand& cmd = scripts[s].commands[k];
      StatementStats st{.statement = ids[s][k],
                        .script = scripts[s].name,
                        .line = cmd.line,
                        .sql = source_text(cmd, options.variables)};
      if (id < statement_count.size()) {
        st.executions = statement_count[id];
        if (st.executions > 0) {
          st.mean_latency_ms =
              static_cast<double>(statement_sum_ns[id]) / st.executions / common::kNsPerMsDouble;
        }
      }
      out.push_back(std::move(st));
    }
  }
  return out;
}

IntervalStats Driver::take_interval_stats() {
  std::lock_guard lock(impl_->interval_mu);
  std::int64_t now_ns = mono_now_ns();
  std::int64_t errors = 0;
  common::LatencyHistogram total = detail::sum_latency(impl_->stats, errors);
  common::LatencyHistogram delta = total.minus(impl_->interval_previous);
  IntervalStats out{
      .queries = delta.count() + (errors - impl_->interval_previous_errors),
      .errors = errors - impl_->interval_previous_errors,
      .mean_latency_ms = delta.mean_ns() / common::kNsPerMsDouble,
      .p99_latency_ms = static_cast<double>(delta.percentile_ns(0.99)) / common::kNsPerMsDouble,
      .interval_ns = now_ns - impl_->interval_start_mono_ns,
  };
  const auto counters = impl_->counters();
  const auto& before = impl_->interval_previous_counters;
  if (impl_->options.rate_tps) {
    std::int64_t n = counters.lag_count - before.lag_count;
    out.mean_lag_ms = n > 0 ? static_cast<double>(counters.lag_sum_ns - before.lag_sum_ns) / n /
                                  common::kNsPerMsDouble
                            : 0.0;
  }
  out.connect_failures = counters.connect_failures - before.connect_failures;
  out.skipped = counters.skipped - before.skipped;
  out.late = counters.late - before.late;
  out.reconnecting = counters.reconnecting;
  impl_->interval_previous_counters = counters;
  impl_->interval_previous = std::move(total);
  impl_->interval_previous_errors = errors;
  impl_->interval_start_mono_ns = now_ns;
  return out;
}

Summary Driver::summary() const {
  std::int64_t errors = 0;
  common::LatencyHistogram total = detail::sum_latency(impl_->stats, errors);
  Summary out{
      .queries = total.count() + errors,
      .errors = errors,
      .elapsed_ns = impl_->driven_ns(),
      .mean_latency_ms = total.mean_ns() / common::kNsPerMsDouble,
      .p99_latency_ms = static_cast<double>(total.percentile_ns(0.99)) / common::kNsPerMsDouble,
  };
  if (out.elapsed_ns > 0) {
    out.tps =
        static_cast<double>(out.queries - out.errors) * common::kNsPerSDouble / out.elapsed_ns;
  }
  const auto counters = impl_->counters();
  if (impl_->options.rate_tps) {
    out.mean_lag_ms = counters.lag_count > 0 ? static_cast<double>(counters.lag_sum_ns) /
                                                   counters.lag_count / common::kNsPerMsDouble
                                             : 0.0;
    out.max_lag_ms = static_cast<double>(counters.lag_max_ns) / common::kNsPerMsDouble;
  }
  out.skipped = counters.skipped;
  out.late = counters.late;
  out.connections = counters.connections;
  out.clients_lost = counters.clients_lost;
  out.connect_failures = counters.connect_failures;
  out.unfinished = counters.unfinished;
  out.retried = counters.retried;
  out.retries = counters.retries;
  out.serialization_failures = counters.serialization_failures;
  out.deadlock_failures = counters.deadlock_failures;
  out.ended_on_failure = counters.ended_on_failure;
  if (impl_->options.per_statement) out.statements = impl_->statement_stats();
  return out;
}

std::string Driver::server_version() const {
  return impl_->server_version;
}

std::optional<std::string> Driver::server_lost() const {
  return impl_->server_lost;
}

}  // namespace stallscope::driver
