// Per-query attribution (correlate/attribution.h): a backend's samples count
// in the accounting only while it served this run's queries; files without
// backend identity fall back to host-wide figures and say so.
//
// The file: 2 clients on backends 201 and 202, 1 s samples at t0 + i s
// (i = 0..10, process rows cover the second before their tick), ASH every
// 100 ms. Client 0 is busy all of [t0, t0 + 10 s) (ten 1 s queries); client
// 1 sends five 1 s queries at t0 .. t0 + 4 s and is then idle.
#include <algorithm>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "correlate/attribution.h"
#include "correlate/correlate.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using test::kMs;
using test::kS;
constexpr std::int64_t kT0 = 1'700'000'000 * kS;
constexpr int kPid[2] = {201, 202};
constexpr std::int64_t kId[2] = {2, 3};

class File {
 public:
  // `identity`: the driver recorded its connections' backend pids (run);
  // else the file looks like an imported pgbench log (no client rows, no
  // connection on the queries).
  explicit File(bool identity = true) : store_(schema::Store::create(":memory:")) {
    auto r = test::run_info(kT0 - 2 * kS);
    if (!identity) {
      r.mode = "import-pgbench";
      r.command_line = "stallscope import-pgbench -o x.db log";
    }
    r.hz = 1;
    r.protocol.reset();
    r.sql.reset();
    store_.begin_run(r);
    store_.end_run(kT0 + 11 * kS, "complete", "duration reached");
    for (int c = 0; c < 2; ++c) {
      b_.processes.push_back({.process_id = kId[c],
                              .pid = kPid[c],
                              .start_ticks = 6000 + c,
                              .start_ns = kT0 - 2 * kS,
                              .comm = "postgres",
                              .first_sample_id = 1});
      if (identity) {
        b_.clients.push_back({.client_id = c,
                              .connection = 0,
                              .thread = 0,
                              .backend_pid = kPid[c],
                              .connect_ns = kT0 - kS});
      }
      for (int k = 0; k < (c == 0 ? 10 : 5); ++k) {
        schema::QueryRow q{.client_id = c, .seq = k, .start_ns = kT0 + k * kS, .latency_ns = kS};
        if (identity) q.connection = 0;
        b_.queries.push_back(q);
      }
    }
    for (int i = 0; i <= 10; ++i) {
      b_.samples.push_back({.sample_id = i + 1,
                            .time_ns = kT0 + i * kS,
                            .mono_ns = i * kS,
                            .interval_ns = i ? std::optional<std::int64_t>(kS) : std::nullopt,
                            .sampler_cpu_ns = 0,
                            .sampler_duration_ns = kMs});
    }
    for (int k = 0; k <= 100; ++k) {
      b_.ash_ticks.push_back(
          {.ash_tick = k + 1, .time_ns = kT0 + k * 100 * kMs, .duration_ns = kMs});
    }
  }

  // Rows at ticks i = 1..10: `cpu_ms` and `delay_ms` each, D state (wchan)
  // on the ticks listed.
  void rows(int c, std::int64_t cpu_ms, std::int64_t delay_ms, std::vector<int> d_ticks = {},
            const std::string& wchan = "folio_wait_bit_common") {
    for (int i = 1; i <= 10; ++i) {
      schema::ProcessSampleRow r{.sample_id = i + 1, .process_id = kId[c]};
      const bool d = std::find(d_ticks.begin(), d_ticks.end(), i) != d_ticks.end();
      r.state = d ? 'D' : 'S';
      if (d) r.wchan = wchan;
      r.cpu_ns = cpu_ms * kMs;
      r.run_delay_ns = delay_ms * kMs;
      r.span_ns = kS;
      b_.process_samples.push_back(r);
    }
  }

  // One backend row at the first tick (t0) whose delta covers the second
  // before it: outside the queries' span.
  void add_row_before_the_span() {
    schema::ProcessSampleRow r{.sample_id = 1, .process_id = kId[0]};
    r.state = 'S';
    r.cpu_ns = 100 * kMs;
    r.span_ns = kS;
    b_.process_samples.push_back(r);
  }

  // ASH rows of backend c on polls first .. first + n − 1 (t0 + k × 100 ms).
  void ash(int c, const std::string& type, const std::string& event, int first, int n) {
    for (int k = first; k < first + n; ++k) {
      b_.pg_activity.push_back({.time_ns = kT0 + k * 100 * kMs,
                                .ash_tick = k + 1,
                                .pid = kPid[c],
                                .backend_type = "client backend",
                                .state = "active",
                                .wait_event_type = type,
                                .wait_event = event});
    }
  }

  Report explain() {
    store_.write(b_);
    b_ = {};
    return correlate::explain(store_, {});
  }

 private:
  schema::Store store_;
  schema::Batch b_;
};

std::int64_t part_ns(const Accounting& a, const std::string& name) {
  for (const auto& p : a.parts)
    if (p.name == name) return p.time_ns;
  return -1;
}

TEST(CorrelateAttribution, BackendSamplesCountOnlyWhileServingTheQueries) {
  File file;
  file.rows(0, 200, 30);  // busy backend: 2 s CPU, 0.3 s run delay, all inside its queries
  // Backend 202 keeps using CPU after its last query (t0 + 5 s): 5 of its 10
  // rows fall outside, and so do its D rows at ticks 7 and 8.
  file.rows(1, 100, 20, {7, 8});
  file.ash(0, "IO", "DataFileRead", 10, 10);  // inside: 1 s
  file.ash(1, "Lock", "tuple", 60, 10);       // t0 + 6 s: 202 serves nothing, left out
  file.ash(1, "Lock", "tuple", 20, 5);        // t0 + 2 s: inside, 0.5 s
  auto r = file.explain();
  ASSERT_TRUE(r.attribution);
  EXPECT_EQ(to_string(r.attribution->method), "per_query");
  EXPECT_EQ(r.attribution->queries, 15);
  EXPECT_EQ(r.attribution->joined_queries, 15);
  EXPECT_EQ(r.attribution->backend_cpu_outside_ns, 500 * kMs);
  EXPECT_EQ(r.attribution->ash_samples_outside, 10);
  ASSERT_TRUE(r.accounting);
  const auto& a = *r.accounting;
  EXPECT_EQ(a.server_cpu_ns, 2 * kS + 500 * kMs);  // host-wide would be 3 s
  EXPECT_EQ(a.run_delay_ns, 300 * kMs + 100 * kMs);
  EXPECT_EQ(part_ns(a, "server_wait:Lock"), 500 * kMs);
  EXPECT_EQ(part_ns(a, "server_wait:IO"), 1 * kS);
  EXPECT_EQ(a.backend_d_state_ns, 0);
  // Per window: the sixth second (202 idle) carries only 201's CPU.
  ASSERT_EQ(r.windows.size(), 10u);
  EXPECT_EQ(r.windows[6].accounting->server_cpu_ns, 200 * kMs);
  EXPECT_EQ(r.windows[2].accounting->server_cpu_ns, 300 * kMs);

  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("per query: 15 of 15 queries joined to their backend"),
            std::string::npos)
      << text.str();
  const auto j = to_json(r);
  EXPECT_EQ(j["attribution"]["method"], "per_query");
  EXPECT_EQ(j["attribution"]["joined_queries"], 15);
}

TEST(CorrelateAttribution, BackendDStateWhileServingIsAPartBeyondAshIoWaits) {
  File file;
  // 201 in D on ticks 2, 3, 4 (t0 + 2..4 s, inside its queries): 3 s of D
  // state at 1 s a sample.
  file.rows(0, 100, 0, {2, 3, 4}, "balance_dirty_pages");
  file.rows(1, 100, 0);
  // ASH saw 0.5 s of IO waits in window 2 (the tick at t0 + 2 s): that much
  // of the D state there is already a server wait.
  file.ash(0, "IO", "DataFileWrite", 20, 5);
  auto r = file.explain();
  ASSERT_TRUE(r.accounting);
  const auto& a = *r.accounting;
  EXPECT_EQ(a.backend_d_state_ns, 3 * kS);
  EXPECT_EQ(a.server_d_state_ns, 2 * kS + 500 * kMs);
  EXPECT_EQ(part_ns(a, "server_d_state:balance_dirty_pages"), 2 * kS + 500 * kMs);
  EXPECT_EQ(part_ns(a, "server_wait:IO"), 500 * kMs);
  EXPECT_EQ(part_ns(*r.windows[2].accounting, "server_d_state:balance_dirty_pages"), 500 * kMs);
  EXPECT_EQ(part_ns(*r.windows[3].accounting, "server_d_state:balance_dirty_pages"), 1 * kS);
  // The D-state part is one of the parts that add up to the query time.
  EXPECT_EQ(a.remainder_ns, a.query_ns - a.server_cpu_ns - a.server_wait_ns - a.server_d_state_ns -
                                a.run_delay_ns - a.driver_cpu_ns);
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("backend D state balance_dirty_pages"), std::string::npos)
      << text.str();
}

TEST(CorrelateAttribution, WithoutBackendIdentityFallsBackToHostWideAndSaysSo) {
  File file(/*identity=*/false);
  file.rows(0, 200, 0);
  file.rows(1, 100, 0);
  file.ash(1, "Lock", "tuple", 60, 10);  // any client backend counts host-wide
  auto r = file.explain();
  ASSERT_TRUE(r.attribution);
  EXPECT_EQ(to_string(r.attribution->method), "host_wide");
  EXPECT_EQ(r.attribution->joined_queries, 0);
  EXPECT_NE(r.attribution->reason.find("no backend identity (imported pgbench log)"),
            std::string::npos)
      << r.attribution->reason;
  EXPECT_EQ(part_ns(*r.accounting, "server_wait:Lock"), 1 * kS);
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("host-wide: the file has no backend identity (imported pgbench log)"),
            std::string::npos)
      << text.str();
  EXPECT_EQ(to_json(r)["attribution"]["method"], "host_wide");
}

// In memory the sweep reads on the store's connection (QuerySendScan); from
// a file, a reader thread with its own connection hands it the rows
// (QuerySendBatches): the same answers either way.
class SweepReader : public ::testing::TestWithParam<bool> {};

TEST_P(SweepReader, MergesABackendsQueriesAndMeasuresOverlap) {
  test::TempDir dir;
  const auto path = GetParam() ? dir.file("sweep.db") : std::string(":memory:");
  auto store = schema::Store::create(path);
  store.begin_run(test::run_info(kT0));
  schema::Batch b;
  b.clients.push_back({.client_id = 0, .connection = 0, .thread = 0, .backend_pid = 300});
  b.clients.push_back({.client_id = 0, .connection = 1, .thread = 0, .backend_pid = 301});
  // Connection 0: [0, 10) and [5, 20) (pipelined: merged) and [30, 40) ms;
  // connection 1: [100, 110) ms; a -R query scheduled at 50 ms, sent at 55.
  for (auto [seq, conn, start, lat, lag] :
       {std::tuple{0, 0, 0, 10, 0}, std::tuple{1, 0, 5, 15, 0}, std::tuple{2, 0, 30, 10, 0},
        std::tuple{3, 1, 100, 10, 0}, std::tuple{4, 0, 50, 10, 5}}) {
    schema::QueryRow q{
        .client_id = 0, .seq = seq, .start_ns = kT0 + start * kMs, .latency_ns = lat * kMs};
    q.connection = conn;
    q.lag_ns = lag * kMs;
    b.queries.push_back(q);
  }
  store.write(b);
  schema::ClientBackendScan clients(store);
  detail::BackendMap map(detail::rows_from<schema::ClientBackend>(clients),
                         [&store] { return schema::queries_name_connections(store); });
  ASSERT_EQ(map.slots(), 2u);
  const int s0 = map.slot_of_pid(300), s1 = map.slot_of_pid(301);
  EXPECT_EQ(map.slot(0, 1), s1);
  EXPECT_EQ(map.slot(0, std::nullopt), -1);
  EXPECT_EQ(map.slot_of_pid(999), -1);
  std::optional<schema::QuerySendScan> here;
  std::optional<schema::QuerySendBatches> beside;
  detail::QuerySweep sweep(
      GetParam() ? detail::rows_from<schema::QuerySend>(beside.emplace(path, INT64_MAX))
                 : detail::rows_from<schema::QuerySend>(here.emplace(store, INT64_MAX)),
      map);
  sweep.advance_to(kT0 + 200 * kMs);
  EXPECT_EQ(sweep.busy_ns(s0, kT0, kT0 + 100 * kMs), (20 + 10 + 5) * kMs);
  EXPECT_EQ(sweep.busy_ns(s0, kT0 + 15 * kMs, kT0 + 35 * kMs), (5 + 5) * kMs);
  EXPECT_EQ(sweep.busy_ns(s0, kT0 + 50 * kMs, kT0 + 55 * kMs), 0);  // lag: not yet sent
  EXPECT_EQ(sweep.busy_ns(s1, kT0, kT0 + 105 * kMs), 5 * kMs);
  sweep.finish();
  EXPECT_EQ(sweep.queries(), 5);
  EXPECT_EQ(sweep.joined(), 5);
}

INSTANTIATE_TEST_SUITE_P(InThreadAndReaderThread, SweepReader, ::testing::Bool());

// Sampling slower than the run (--hz 0.1 on a 10 s run): no process row's
// CPU delta covers the queries, so CPU, run queue and the remainder are
// unknown — said so, not printed as 0 (nor the remainder as a round trip).
TEST(CorrelateAttribution, NoCpuDeltaInsideTheSpanCannotAccountInsteadOfZero) {
  File file;
  file.add_row_before_the_span();
  file.ash(0, "Lock", "tuple", 10, 20);  // 2 s of lock waits: still known
  auto r = file.explain();
  ASSERT_TRUE(r.accounting);
  const auto& a = *r.accounting;
  ASSERT_TRUE(a.cannot_account);
  EXPECT_NE(a.cannot_account->find("no process sample with a CPU delta covers this span"),
            std::string::npos);
  EXPECT_EQ(part_ns(a, "server_cpu"), -1);
  EXPECT_EQ(part_ns(a, "driver_cpu"), -1);
  EXPECT_EQ(part_ns(a, "run_queue"), -1);
  EXPECT_EQ(part_ns(a, "remainder"), -1);
  EXPECT_EQ(part_ns(a, "server_wait:Lock"), 2 * kS);
  ASSERT_TRUE(r.windows[0].accounting->cannot_account);
  for (const auto& f : r.findings) EXPECT_NE(to_string(f.kind), "network_roundtrip");
  const auto j = to_json(r);
  EXPECT_TRUE(j["accounting"]["server_cpu_ns"].is_null());
  EXPECT_TRUE(j["accounting"]["remainder_ns"].is_null());
  EXPECT_TRUE(j["accounting"]["cannot_account"].is_string());
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("cannot account CPU, run-queue delay or the remainder"),
            std::string::npos)
      << text.str();
  EXPECT_EQ(text.str().find("server backend CPU"), std::string::npos) << text.str();
}

}  // namespace
}  // namespace stallscope::correlate
