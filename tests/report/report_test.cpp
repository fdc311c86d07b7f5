// The HTML report's data and page (report/): the timelines and tables of a
// record file and of a run file built row by row, the grid, the comparison
// sentences, and the page's escaping of untrusted text.
#include <gtest/gtest.h>

#include <sstream>

#include "correlate/correlate.h"
#include "correlate/record_fixture.h"
#include "report/report.h"
#include "support/test_support.h"

namespace stallscope::report {
namespace {

using namespace correlate::test_record;

const char* const kHostileComm = "<img src=x oner";  // 15 bytes, as comm keeps
const char* const kHostileSql = "</script><script>alert(1)</script>";

const nlohmann::json* chart(const nlohmann::json& data, const std::string& id) {
  for (const auto& c : data["timeline"]["charts"])
    if (c["id"] == id) return &c;
  return nullptr;
}

const nlohmann::json* series(const nlohmann::json& chart, const std::string& label) {
  for (const auto& s : chart["series"])
    if (s["label"] == label) return &s;
  return nullptr;
}

// The record-file skeleton with: host CPU 500 ms user a second of 2 cores; a
// backend on CPU 300 ms every second; a process named kHostileComm in D
// state on io_schedule the whole time; the backend active in every ASH poll,
// in even polls waiting on Lock:transactionid, running kHostileSql.
RecordFile record_case() {
  auto f = record_file_skeleton(500);
  auto& b = f.batch;
  b.processes.push_back({.process_id = 4,
                         .pid = 400,
                         .start_ticks = 7000,
                         .start_ns = kRecordT0 - 3 * kS,
                         .comm = kHostileComm,
                         .cmdline = "<img src=x onerror=alert(1)> --flag",
                         .first_sample_id = 1});
  for (int i = 2; i <= 11; ++i) {
    b.process_samples.push_back({.sample_id = i,
                                 .process_id = 2,
                                 .state = 'R',
                                 .cpu_ns = 300 * kMs,
                                 .run_delay_ns = 50 * kMs,
                                 .span_ns = kS});
    b.process_samples.push_back({.sample_id = i,
                                 .process_id = 4,
                                 .state = 'D',
                                 .cpu_ns = 0,
                                 .run_delay_ns = 0,
                                 .wchan = "io_schedule",
                                 .span_ns = kS});
  }
  // The same statement stored twice: first seen without a query_id, then with.
  b.pg_query_texts.push_back(
      {.query_text_id = 1, .query = kHostileSql, .first_time_ns = kRecordT0});
  b.pg_query_texts.push_back({.query_text_id = 2,
                              .query_id = 923593237829113620,
                              .query = kHostileSql,
                              .first_time_ns = kRecordT0 + 5 * kS});
  for (int k = 0; k < 100; ++k) {
    schema::PgActivityRow a{.time_ns = kRecordT0 + k * 100 * kMs,
                            .ash_tick = k + 1,
                            .pid = kRecordBackendPid,
                            .backend_type = "client backend",
                            .state = "active",
                            .application_name = "django",
                            .query_text_id = k < 50 ? 1 : 2,
                            .backend_start_ns = kRecordT0 - kS};
    if (k % 2 == 0) {
      a.wait_event_type = "Lock";
      a.wait_event = "transactionid";
    }
    b.pg_activity.push_back(a);
  }
  f.store.write(b);
  return f;
}

TEST(ReportPage, HostDatabaseAndProcessTimelinesOfARecordFile) {
  auto f = record_case();
  const auto r = correlate::explain(f.store, {});
  Page page(r, {.title = "rec.db", .run_path = "rec.db"});
  page.add_queries(f.store);
  page.add_host(f.store, {.name = r.run.host, .kernel = r.run.kernel, .cores = r.run.cores});
  page.add_database(f.store, r.run.cores);
  const auto data = page.data();

  // 10 Hz sampling over 10 s of windows: 100 ms bins.
  EXPECT_EQ(data["timeline"]["bin_ns"], 100 * kMs);
  EXPECT_EQ(chart(data, "throughput"), nullptr) << "a record file has no queries";

  // Host CPU: 500 ms of 2000 ms user in every tick with deltas.
  const auto* cpu = chart(data, "host_cpu:db1");
  ASSERT_NE(cpu, nullptr);
  int ticks = 0;
  for (const auto& v : (*series(*cpu, "user"))["values"]) {
    if (v.is_null()) continue;
    ++ticks;
    EXPECT_DOUBLE_EQ(v.get<double>(), 25.0);
  }
  EXPECT_EQ(ticks, 10);
  EXPECT_TRUE((*cpu)["stacked"].get<bool>());

  // The backend's 300 ms a second spread over the second each row covers:
  // 0.3 cores in every bin of samples 2..11.
  const auto* proc = chart(data, "process_cpu:db1");
  ASSERT_NE(proc, nullptr);
  const auto& pg = (*series(*proc, "postgres"))["values"];
  EXPECT_NEAR(pg[50].get<double>(), 0.3, 1e-9);
  EXPECT_NEAR(pg[5].get<double>(), 0.3, 1e-9);
  EXPECT_EQ(series(*proc, kHostileComm), nullptr) << "it never ran";

  // Database load: one active session per poll, half of them in Lock.
  const auto* aas = chart(data, "aas");
  ASSERT_NE(aas, nullptr);
  EXPECT_EQ((*aas)["series"][0]["label"], "CPU") << "CPU is stacked first";
  double lock_sum = 0, cpu_sum = 0;
  for (const auto& v : (*series(*aas, "Lock"))["values"])
    lock_sum += v.is_null() ? 0 : v.get<double>();
  for (const auto& v : (*series(*aas, "CPU"))["values"])
    cpu_sum += v.is_null() ? 0 : v.get<double>();
  EXPECT_DOUBLE_EQ(lock_sum, 50);
  EXPECT_DOUBLE_EQ(cpu_sum, 50);
  EXPECT_EQ((*aas)["lines"][0]["value"], 2);

  // Tables: the D-state process ranks by off-CPU time with its wchan; the
  // SQL keeps its text as given.
  const auto& procs = data["tables"]["processes"];
  ASSERT_GE(procs.size(), 2u);
  EXPECT_EQ(procs[0]["comm"], "postgres");
  EXPECT_NEAR(procs[0]["cpu_s"].get<double>(), 3.0, 1e-9);
  bool found = false;
  for (const auto& p : procs) {
    if (p["comm"] != kHostileComm) continue;
    found = true;
    EXPECT_NEAR(p["d_state_s"].get<double>(), 10.0, 1e-9);
    EXPECT_EQ(p["top_wchan"], "io_schedule");
    EXPECT_EQ(p["cmdline"], "<img src=x onerror=alert(1)> --flag");
  }
  EXPECT_TRUE(found);
  const auto& sql = data["tables"]["sql"];
  ASSERT_EQ(sql.size(), 1u);
  EXPECT_EQ(sql[0]["query"], kHostileSql);
  EXPECT_EQ(sql[0]["samples"], 100) << "one statement, one row";
  EXPECT_EQ(sql[0]["query_id"], "923593237829113620");
  EXPECT_DOUBLE_EQ(sql[0]["cpu_share"].get<double>(), 0.5);
  EXPECT_EQ(sql[0]["top_wait"], "Lock:transactionid");
  EXPECT_EQ(data["tables"]["wait_events"][0]["samples"], 50);
}

TEST(ReportPage, UntrustedTextCannotLeaveTheDataScript) {
  auto f = record_case();
  const auto r = correlate::explain(f.store, {});
  Page page(r, {.title = std::string(kHostileSql) + "\xe2\x80\xa8<!--", .run_path = "rec.db"});
  page.add_host(f.store, {.name = r.run.host, .kernel = r.run.kernel, .cores = r.run.cores});
  page.add_database(f.store, r.run.cores);
  const auto data = page.data();
  std::ostringstream out;
  write_html(data, out);
  const auto html = out.str();
  EXPECT_EQ(html.find(kHostileSql), std::string::npos);
  EXPECT_EQ(html.find("<img src=x"), std::string::npos);
  EXPECT_NE(html.find("<title>stallscope report — &lt;/script&gt;&lt;script&gt;"),
            std::string::npos);
  // The data element holds exactly the data.
  const std::string open = "<script type=\"application/json\" id=\"stallscope-data\">";
  const auto from = html.find(open);
  ASSERT_NE(from, std::string::npos);
  const auto to = html.find("</script>", from);
  const auto json_text = html.substr(from + open.size(), to - from - open.size());
  EXPECT_EQ(json_text.find("\xe2\x80\xa8"), std::string::npos) << "U+2028 ends a line in script";
  const auto parsed = nlohmann::json::parse(json_text);
  EXPECT_EQ(parsed, data);
  EXPECT_EQ(parsed["title"].get<std::string>().substr(0, 9), "</script>");
}

TEST(ReportPage, ThroughputLatencyAndLagOfQueriesBinnedByAnswer) {
  auto store = schema::Store::create(":memory:");
  auto info = test::run_info(kRecordT0);
  info.clients = 1;
  store.begin_run(info);
  store.end_run(kRecordT0 + 10 * kS, "complete", "duration reached");
  schema::Batch b;
  b.clients.push_back({.client_id = 0, .connection = 0});
  // 100 queries a second for 10 s, 2 ms each, lag 1 ms; in second 5, 20 ms each.
  for (int i = 0; i < 1000; ++i) {
    const bool slow = i >= 500 && i < 600;
    b.queries.push_back({.client_id = 0,
                         .seq = i,
                         .start_ns = kRecordT0 + i * 10 * kMs,
                         .latency_ns = (slow ? 20 : 2) * kMs,
                         .rows = 1,
                         .connection = 0,
                         .lag_ns = kMs});
  }
  store.write(b);
  const auto r = correlate::explain(store, {});
  Page page(r, {.title = "run.db", .run_path = "run.db"});
  page.add_queries(store);
  const auto data = page.data();
  const auto bin_ns = data["timeline"]["bin_ns"].get<std::int64_t>();
  ASSERT_EQ(bin_ns, 100 * kMs);
  const auto* tput = chart(data, "throughput");
  ASSERT_NE(tput, nullptr);
  // 10 answers a 100 ms bin: 100 queries/s.
  EXPECT_DOUBLE_EQ((*series(*tput, "answered"))["values"][20].get<double>(), 100);
  const auto* lat = chart(data, "latency");
  ASSERT_NE(lat, nullptr);
  EXPECT_TRUE((*lat)["y_log"].get<bool>());
  const auto& p99 = (*series(*lat, "p99"))["values"];
  EXPECT_NEAR(p99[20].get<double>(), 2.0, 2.0 * 0.07);
  EXPECT_NEAR(p99[55].get<double>(), 20.0, 20.0 * 0.07);
  const auto* lag = chart(data, "schedule_lag");
  ASSERT_NE(lag, nullptr);
  EXPECT_DOUBLE_EQ((*series(*lag, "mean"))["values"][20].get<double>(), 1.0);
}

TEST(ReportPage, AnAggregatePgbenchLogGivesThroughputAndMeanLatencyPerInterval) {
  auto store = schema::Store::create(":memory:");
  // One aggregate initialiser (see test::run_info): an imported log, no sampling.
  const schema::RunInfo info{.mode = "import-pgbench",
                             .host = "c1",
                             .kernel = "6.1.0",
                             .cores = 4,
                             .clock_ticks_per_s = 100,
                             .start_ns = kRecordT0,
                             .command_line = "stallscope import-pgbench -o agg.db pgbench_log.1",
                             .tool_version = "0",
                             .hz = 0};
  store.begin_run(info);
  store.end_run(kRecordT0 + 10 * kS, "complete", "imported");
  schema::Batch b;
  // 10 one-second intervals of 500 transactions at 4 ms, the 4th at 40 ms.
  for (int i = 0; i < 10; ++i) {
    const std::int64_t latency_ns = (i == 3 ? 40 : 4) * kMs;
    b.pgbench_aggregates.push_back({.file = "pgbench_log.1",
                                    .line = i + 1,
                                    .interval_start_ns = kRecordT0 + i * kS,
                                    .transactions = 500,
                                    .latency_sum_ns = 500 * latency_ns});
  }
  store.write(b);
  const auto r = correlate::explain(store, {});
  ASSERT_TRUE(r.pgbench_aggregate.has_value());
  Page page(r, {.title = "agg.db", .run_path = "agg.db"});
  page.add_queries(store);
  const auto data = page.data();
  const auto bin_ns = data["timeline"]["bin_ns"].get<std::int64_t>();
  const auto bin_of = [&](std::int64_t t_ns) {
    return static_cast<std::size_t>((t_ns - data["timeline"]["start_ns"].get<std::int64_t>()) /
                                    bin_ns);
  };
  const auto* tput = chart(data, "throughput");
  ASSERT_NE(tput, nullptr);
  EXPECT_DOUBLE_EQ(
      (*series(*tput, "transactions"))["values"][bin_of(kRecordT0 + 1500 * kMs)].get<double>(),
      500);
  const auto* lat = chart(data, "latency");
  ASSERT_NE(lat, nullptr);
  const auto& mean = (*series(*lat, "mean"))["values"];
  EXPECT_DOUBLE_EQ(mean[bin_of(kRecordT0 + 1500 * kMs)].get<double>(), 4);
  EXPECT_DOUBLE_EQ(mean[bin_of(kRecordT0 + 3500 * kMs)].get<double>(), 40);
}

TEST(ReportGrid, AtMostMaxBinsAndNoShorterThanASamplePeriod) {
  correlate::Report r;
  r.run.hz = 10;
  r.run.start_ns = kRecordT0;
  r.run.end_ns = kRecordT0 + 3600 * kS;
  auto g = grid_for(r, 1000);
  EXPECT_EQ(g.bin_ns, 3600 * kMs);
  EXPECT_EQ(g.bins(), 1000);
  r.run.end_ns = kRecordT0 + 20 * kS;
  g = grid_for(r, 1000);
  EXPECT_EQ(g.bin_ns, 100 * kMs);
  EXPECT_EQ(g.bins(), 200);
  EXPECT_EQ(g.bin_of(kRecordT0 + 150 * kMs), 1);
  EXPECT_EQ(g.bin_of(kRecordT0 + 20 * kS), std::nullopt);
  EXPECT_EQ(g.bin_of(kRecordT0 - 1), std::nullopt);
}

TEST(ReportGrid, AStallOfALongRunGetsBinsOfOneSamplePeriod) {
  correlate::Report r;
  r.run.hz = 10;
  r.run.start_ns = kRecordT0;
  r.run.end_ns = kRecordT0 + 3600 * kS;
  correlate::Stall s;
  s.start_ns = kRecordT0 + 1800 * kS;
  s.end_ns = s.start_ns + kS;
  r.stalls.push_back(s);
  const auto g = grid_for(r, 1000);
  EXPECT_EQ(g.bin_ns, 3600 * kMs);
  EXPECT_EQ(g.fine_bin_ns, 100 * kMs);
  // Inside the stall and 3 overview bins + its length either side: 100 ms.
  EXPECT_EQ(g.width_ns(*g.bin_of(s.start_ns + 550 * kMs)), 100 * kMs);
  EXPECT_EQ(g.width_ns(*g.bin_of(s.start_ns - 11 * kS)), 100 * kMs);
  EXPECT_EQ(g.width_ns(*g.bin_of(s.end_ns + 11 * kS)), 100 * kMs);
  // Far from it: overview bins, on the same edges as without the stall.
  EXPECT_EQ(g.width_ns(*g.bin_of(kRecordT0 + 60 * kS)), 3600 * kMs);
  EXPECT_EQ(g.bin_start_ns(*g.bin_of(kRecordT0 + 3000 * kS)) % (3600 * kMs),
            kRecordT0 % (3600 * kMs));
  EXPECT_EQ(g.start_ns(), kRecordT0);
  EXPECT_EQ(g.end_ns(), kRecordT0 + 3600 * kS);
  EXPECT_LE(g.bins(), 1000 + Grid::kDetailBinsPerStall);
  for (int i = 0; i < g.bins(); ++i) ASSERT_GT(g.width_ns(i), 0);
}

TEST(ReportDifferences, PartsThatMovedByFivePointsLargestFirst) {
  auto side = [](double lock_share, double cpu_share) {
    correlate::Report r;
    r.run.queries = 1000;
    r.run.latency_mean_ms = 10;
    correlate::Accounting a;
    a.query_ns = 10'000 * kMs;
    a.parts = {{"server_wait:Lock", static_cast<std::int64_t>(lock_share * 1e10), lock_share, ""},
               {"server_cpu", static_cast<std::int64_t>(cpu_share * 1e10), cpu_share, ""},
               {"remainder", static_cast<std::int64_t>((1 - lock_share - cpu_share) * 1e10),
                1 - lock_share - cpu_share, ""}};
    r.accounting = a;
    return r;
  };
  const auto run = side(0.40, 0.30);
  const auto base = side(0.02, 0.31);
  correlate::RunComparison c;
  c.summary = "run.db: 100 tps vs 300 tps base.db (-67%)";
  const auto d = differences(run, base, c);
  ASSERT_GE(d.size(), 3u);
  EXPECT_EQ(d[0], c.summary);
  EXPECT_EQ(d[2], "server_wait:Lock rose from 0.2 to 4 ms a query (2% → 40% of query time).");
  EXPECT_EQ(d[3], "remainder fell from 6.7 to 3 ms a query (67% → 30% of query time).");
  // 3.1 → 3.0 ms: 1% of the mean latency and 1 point: not a difference.
  for (const auto& s : d) EXPECT_EQ(s.find("server_cpu"), std::string::npos) << s;
}

}  // namespace
}  // namespace stallscope::report
