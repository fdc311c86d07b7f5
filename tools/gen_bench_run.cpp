// stallscope-gen-run: writes a synthetic run file for `tools/bench correlate`
// through the real store (schema version 2): QUERIES queries from 16 clients spread
// evenly over SECONDS, and host, process and ASH samples at 10 Hz for
// PROCESSES processes (the driver, 16 backends, the rest background
// processes using a little CPU), with a slow stretch (backends in D state on
// IO:WALSync, latency ×5) in the middle so stalls and io_wait have something
// to find.
//
//   stallscope-gen-run OUT.db [QUERIES=10000000] [SECONDS=3600] [PROCESSES=300]
//
// Exit status 0; 1 with a one-line message (e.g. OUT.db exists); 2 for a
// usage error (wrong argument count, an argument that is not an integer).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/parse.h"
#include "common/units.h"
#include "schema/store.h"

namespace {

constexpr std::int64_t kS = stallscope::common::kNsPerS;
constexpr std::int64_t kMs = stallscope::common::kNsPerMs;
constexpr int kClients = 16;
constexpr int kDriverPid = 1000;
constexpr int kBackendPid0 = 2000;

using namespace stallscope::schema;

// The run row: a `run` of kClients clients at 10 Hz, starting at t0 − 1 s.
RunInfo bench_run_info(std::int64_t t0) {
  RunInfo r;
  r.mode = "run";
  r.host = "bench";
  r.kernel = "6.1.0";
  r.cores = 8;
  r.clock_ticks_per_s = 100;
  r.start_ns = t0 - kS;
  r.command_line = "stallscope-gen-run";
  r.tool_version = "bench";
  r.hz = 10;
  r.stallscope_pid = kDriverPid;
  r.stallscope_start_ticks = 100;
  r.clients = kClients;
  r.threads = 2;
  r.protocol = "simple";
  r.sql = "SELECT 1";
  return r;
}

// The process rows (process_id 1 the driver, then the kClients backends, the
// rest daemons up to `processes`) and the client rows.
Batch bench_processes(std::int64_t t0, int processes) {
  Batch b;
  b.processes.push_back({.process_id = 1,
                         .pid = kDriverPid,
                         .start_ticks = 100,
                         .start_ns = t0 - 2 * kS,
                         .comm = "stallscope",
                         .first_sample_id = 1});
  for (int c = 0; c < kClients; ++c) {
    b.processes.push_back({.process_id = 2 + c,
                           .pid = kBackendPid0 + c,
                           .start_ticks = 200 + c,
                           .start_ns = t0 - 2 * kS,
                           .comm = "postgres",
                           .first_sample_id = 1});
    b.clients.push_back({.client_id = c,
                         .connection = 0,
                         .thread = c % 2,
                         .backend_pid = kBackendPid0 + c,
                         .connect_ns = t0 - kS});
  }
  for (int p = 2 + kClients; p <= processes; ++p) {
    b.processes.push_back({.process_id = p,
                           .pid = 5000 + p,
                           .start_ticks = 50,
                           .start_ns = t0 - 100 * kS,
                           .comm = "daemon" + std::to_string(p),
                           .first_sample_id = 1});
  }
  return b;
}

// The generated run's timeline: ticks every 100 ms from t0, queries evenly
// spread over `span_ns`, and the slow stretch [slow_from, slow_to) from t0.
struct Plan {
  std::int64_t t0 = 0;
  int processes = 0;
  std::int64_t span_ns = 0;
  std::int64_t per_client = 0;
  std::int64_t gap_ns = 0;
  std::int64_t slow_from = 0, slow_to = 0;
  std::int64_t total_queries = 0;
  std::int64_t ticks = 0;

  Plan(std::int64_t t0_ns, std::int64_t queries, std::int64_t seconds, int process_count)
      : t0(t0_ns),
        processes(process_count),
        span_ns(seconds * kS),
        per_client(queries / kClients),
        gap_ns(span_ns / std::max<std::int64_t>(1, per_client)),
        slow_from(span_ns / 2),
        slow_to(span_ns / 2 + 20 * kS),
        total_queries(per_client * kClients),
        ticks(seconds * 10) {}
  bool slow_at(std::int64_t t) const { return t - t0 >= slow_from && t - t0 < slow_to; }
};

// A fixed-seed LCG: the same file every time.
struct Rng {
  std::uint64_t state = 42;
  std::uint64_t operator()() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  }
};

// One process_sample row per process at tick k (sample k + 1, time t).
void add_process_samples(Batch& b, const Plan& plan, std::int64_t k, bool slow, Rng& rnd) {
  for (int p = 1; p <= plan.processes; ++p) {
    ProcessSampleRow ps{.sample_id = k + 1, .process_id = p};
    const bool backend = p >= 2 && p < 2 + kClients;
    ps.state = backend && slow ? 'D' : (rnd() % 10 == 0 ? 'R' : 'S');
    if (ps.state == 'D') ps.wchan = "submit_bio_wait";
    ps.cpu_ns = p == 1 ? 30 * kMs : backend ? (slow ? 2 : 15) * kMs : std::int64_t(rnd() % 2) * kMs;
    ps.run_delay_ns = backend ? 1 * kMs : 0;
    ps.utime_ticks = 1;
    ps.stime_ticks = 0;
    // As the sampler records them (root): counters that did not move are
    // 0, not unknown, so they need no process_io_sample row.
    ps.majflt = 0;
    ps.read_bytes = 0;
    ps.write_bytes = ps.state == 'D' ? 8192 : 0;  // the slow stretch's WAL flushes
    ps.rss_bytes = 16 << 20;
    ps.span_ns = 100 * kMs;
    b.process_samples.push_back(ps);
  }
}

// The rows of tick k: sample, host sample and (after the first tick) the
// process samples and one ASH tick with half the clients active.
void add_tick(Batch& b, const Plan& plan, std::int64_t k, Rng& rnd) {
  const std::int64_t t = plan.t0 + k * 100 * kMs;
  const bool slow = plan.slow_at(t);
  b.samples.push_back({.sample_id = k + 1,
                       .time_ns = t,
                       .mono_ns = k * 100 * kMs,
                       .interval_ns = k ? std::optional<std::int64_t>(100 * kMs) : std::nullopt,
                       .sampler_cpu_ns = 2 * kMs,
                       .sampler_duration_ns = 2 * kMs});
  HostSampleRow h{.sample_id = k + 1};
  if (k > 0) {
    h.cpu_user_ns = 300 * kMs;
    h.cpu_nice_ns = 0;
    h.cpu_system_ns = 100 * kMs;
    h.cpu_idle_ns = slow ? 200 * kMs : 400 * kMs;
    h.cpu_iowait_ns = slow ? 200 * kMs : 0;
    h.cpu_irq_ns = 0;
    h.cpu_softirq_ns = 0;
    h.cpu_steal_ns = 0;
  }
  h.procs_running = 3;
  h.processes_total = plan.processes;
  h.processes_d_state = slow ? kClients : 0;
  b.host_samples.push_back(h);
  if (k == 0) return;
  add_process_samples(b, plan, k, slow, rnd);
  b.ash_ticks.push_back({.ash_tick = k, .time_ns = t, .duration_ns = kMs});
  for (int c = 0; c < kClients; c += 2) {
    PgActivityRow a{.time_ns = t, .ash_tick = k, .pid = kBackendPid0 + c};
    a.backend_type = "client backend";
    a.state = "active";
    if (slow) {
      a.wait_event_type = "IO";
      a.wait_event = "WALSync";
    }
    b.pg_activity.push_back(a);
  }
}

// The queries that start before `until_ns`, from the `next_query`th (index
// in time order over all clients, round robin), in time order.
void add_queries(Batch& b, const Plan& plan, std::int64_t until_ns, std::int64_t& next_query,
                 Rng& rnd) {
  while (next_query < plan.total_queries) {
    const std::int64_t seq = next_query / kClients;
    const int client = static_cast<int>(next_query % kClients);
    const std::int64_t start = plan.t0 + seq * plan.gap_ns + client * (plan.gap_ns / kClients);
    if (start >= until_ns) break;
    const std::int64_t latency =
        (plan.slow_at(start) ? 5 : 1) * (plan.gap_ns / 2) + std::int64_t(rnd() % 1000);
    b.queries.push_back({.client_id = client,
                         .seq = seq,
                         .start_ns = start,
                         .latency_ns = latency,
                         .rows = 1,
                         .connection = 0});
    ++next_query;
  }
}

int generate(const std::string& path, std::int64_t queries, std::int64_t seconds, int processes) {
  auto store = Store::create(path);
  const Plan plan(1'800'000'000 * kS, queries, seconds, processes);
  store.begin_run(bench_run_info(plan.t0));
  store.write(bench_processes(plan.t0, processes));

  Batch b;
  std::int64_t next_query = 0;
  Rng rnd;
  for (std::int64_t k = 0; k <= plan.ticks; ++k) {
    add_tick(b, plan, k, rnd);
    // Queries sent before the next tick.
    add_queries(b, plan, plan.t0 + k * 100 * kMs + 100 * kMs, next_query, rnd);
    if (b.process_samples.size() >= 200'000 || b.queries.size() >= 200'000) {
      store.write(b);
      b = {};
    }
  }
  store.write(b);
  store.end_run(plan.t0 + plan.span_ns + kS, "complete", "duration reached");
  std::printf("%s: %lld queries, %lld ticks x %d processes\n", path.c_str(),
              static_cast<long long>(plan.total_queries), static_cast<long long>(plan.ticks),
              processes);
  return 0;
}

// The integer argument argv[i] (named `name` in the usage line), or
// `fallback` when it is not given; nullopt, after a one-line message, when it
// is not an integer of type T.
template <typename T>
std::optional<T> int_arg(int argc, char** argv, int i, const char* name, T fallback) {
  if (argc <= i) return fallback;
  const auto value = stallscope::common::parse_integer<T>(argv[i]);
  if (!value) {
    std::fprintf(stderr, "stallscope-gen-run: cannot use %s '%s': expected an integer\n", name,
                 argv[i]);
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 5) {
    std::fprintf(stderr, "usage: stallscope-gen-run OUT.db [QUERIES] [SECONDS] [PROCESSES]\n");
    return 2;
  }
  const auto queries = int_arg<std::int64_t>(argc, argv, 2, "QUERIES", 10'000'000);
  const auto seconds = int_arg<std::int64_t>(argc, argv, 3, "SECONDS", 3600);
  const auto processes = int_arg<int>(argc, argv, 4, "PROCESSES", 300);
  if (!queries || !seconds || !processes) return 2;
  try {
    return generate(argv[1], *queries, *seconds, *processes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stallscope-gen-run: %s\n", e.what());
    return 1;
  }
}
