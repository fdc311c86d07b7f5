// The correlator on hand-made run files with exact numbers (run_fixture.h):
// client + server pairs (the accounting split by host, the clock offset) and run comparisons.
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "correlate/format.h"
#include "correlate/run_fixture.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using namespace test_run;

// Client + server: a run file from the client host (queries, the driver)
// and a record file from the database host (backends, ASH) over the same
// 10 s. `offset_s` shifts the server file's times.
void write_pair(const std::string& client_path, const std::string& server_path,
                std::int64_t offset_s) {
  auto base_run = [](const std::string& mode, const std::string& host) {
    schema::RunInfo r;
    r.mode = mode;
    r.host = host;
    r.kernel = "6.1.0";
    r.cores = 4;
    r.clock_ticks_per_s = 100;
    r.start_ns = kT0 - kS;
    r.command_line = "stallscope " + mode;
    r.tool_version = "0";
    r.hz = 10;
    r.stallscope_pid = kDriverPid;
    return r;
  };
  auto samples = [](schema::Batch& b, std::int64_t shift_ns) {
    for (int i = 0; i <= 10; ++i) {
      b.samples.push_back({.sample_id = i + 1,
                           .time_ns = kT0 + shift_ns + i * kS,
                           .mono_ns = i * kS,
                           .interval_ns = i ? std::optional<std::int64_t>(kS) : std::nullopt,
                           .sampler_cpu_ns = 0,
                           .sampler_duration_ns = kMs});
      schema::HostSampleRow h{.sample_id = i + 1};
      if (i > 0) {
        h.cpu_user_ns = 400 * kMs, h.cpu_nice_ns = 0, h.cpu_system_ns = 0,
        h.cpu_idle_ns = 3600 * kMs;
        h.cpu_iowait_ns = 0, h.cpu_irq_ns = 0, h.cpu_softirq_ns = 0, h.cpu_steal_ns = 0;
      }
      b.host_samples.push_back(h);
    }
  };
  {
    auto store = schema::Store::create(client_path);
    auto r = base_run("run", "app1");
    r.clients = 2;
    r.threads = 1;
    r.sql = "UPDATE hot SET n = n + 1";
    store.begin_run(r);
    schema::Batch b;
    samples(b, 0);
    b.processes.push_back({.process_id = 1,
                           .pid = kDriverPid,
                           .start_ticks = 5000,
                           .start_ns = kT0 - 3 * kS,
                           .comm = "stallscope",
                           .first_sample_id = 1});
    for (int i = 1; i <= 10; ++i) {
      schema::ProcessSampleRow row{.sample_id = i + 1, .process_id = 1};
      row.state = 'S';
      row.cpu_ns = 200 * kMs;  // the driver: 2 s over the run
      row.run_delay_ns = 0;
      row.span_ns = kS;
      b.process_samples.push_back(row);
    }
    for (int c = 0; c < 2; ++c) {
      b.clients.push_back(
          {.client_id = c, .thread = 0, .backend_pid = kBackendPid[c], .connect_ns = kT0 - kS});
      for (int k = 0; k < 10; ++k)
        b.queries.push_back({.client_id = c, .seq = k, .start_ns = kT0 + k * kS, .latency_ns = kS});
    }
    store.write(b);
    store.end_run(kT0 + 11 * kS, "complete", "duration reached");
  }
  {
    auto store = schema::Store::create(server_path);
    auto r = base_run("record", "db1");
    r.start_ns += offset_s * kS;
    store.begin_run(r);
    schema::Batch b;
    samples(b, offset_s * kS);
    for (int c = 0; c < 2; ++c) {
      b.processes.push_back({.process_id = 10 + c,
                             .pid = kBackendPid[c],
                             .start_ticks = 6000 + c,
                             .start_ns = kT0 - 2 * kS + offset_s * kS,
                             .comm = "postgres",
                             .first_sample_id = 1});
      for (int i = 1; i <= 10; ++i) {
        schema::ProcessSampleRow row{.sample_id = i + 1, .process_id = 10 + c};
        row.state = 'S';
        row.cpu_ns = 100 * kMs;  // each backend: 1 s over the run
        row.run_delay_ns = 0;
        row.span_ns = kS;
        b.process_samples.push_back(row);
      }
    }
    for (int k = 0; k <= 100; ++k) {
      b.ash_ticks.push_back(
          {.ash_tick = k + 1, .time_ns = kT0 + offset_s * kS + k * 100 * kMs, .duration_ns = kMs});
      if (k < 80) {  // 16 s of Lock waits: with 2 s of each CPU, the 20 s of query time
        for (int pid : kBackendPid) {
          b.pg_activity.push_back({.time_ns = kT0 + offset_s * kS + k * 100 * kMs,
                                   .ash_tick = k + 1,
                                   .pid = pid,
                                   .backend_type = "client backend",
                                   .state = "active",
                                   .wait_event_type = "Lock",
                                   .wait_event = "transactionid"});
        }
      }
    }
    store.write(b);
    store.end_run(kT0 + 11 * kS + offset_s * kS, "complete", "duration reached");
  }
}

TEST(CorrelatePair, SplitsTheAccountingBetweenClientAndServerHost) {
  test::TempDir dir;
  write_pair(dir.file("client.db"), dir.file("server.db"), 0);
  auto client = schema::Store::open_readwrite(dir.file("client.db"));
  auto r = explain_pair(client, dir.file("server.db"), {});
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "driver_cpu"), 2 * kS);         // from the client file
  EXPECT_EQ(part_ns(*r.accounting, "server_cpu"), 2 * kS);         // backends on the server host
  EXPECT_EQ(part_ns(*r.accounting, "server_wait:Lock"), 16 * kS);  // 160 ASH rows × 0.1 s
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "lock_wait");
  ASSERT_EQ(r.hosts.size(), 2u);
  EXPECT_EQ(r.hosts[0].role, "client");
  EXPECT_EQ(r.hosts[0].host, "app1");
  EXPECT_EQ(r.hosts[1].role, "server");
  EXPECT_EQ(r.hosts[1].host, "db1");
  EXPECT_DOUBLE_EQ(*r.hosts[1].cpu_busy_pct, 10.0);
  EXPECT_NE(r.notes.front().find("assumed to share one clock"), std::string::npos);
  // The client file is left as it was: no views, no attached file.
  EXPECT_EQ(client.db().execAndGet("SELECT count(*) FROM process").getInt64(), 1);
}

// The server's clock runs 5 s ahead of the client's. With the driver's
// estimate in the run file the server's rows line up with the queries as if
// both clocks agreed; without it, only the server's first 5 s overlap.
TEST(CorrelatePair, ShiftsServerTimesByTheNearestClockOffsetEstimate) {
  test::TempDir dir;
  write_pair(dir.file("client.db"), dir.file("server.db"), 5);
  {
    auto client = schema::Store::open_readwrite(dir.file("client.db"));
    client.db().exec(
        fmt::format("INSERT INTO clock_offset VALUES ({0}, {2}, {3}, {4}, 5, 'start'), "
                    "({1}, {2}, {3}, {4}, 5, 'end')",
                    kT0, kT0 + 10 * kS, 5 * kS, 250'000, 500'000));
  }
  auto client = schema::Store::open_readwrite(dir.file("client.db"));
  auto r = explain_pair(client, dir.file("server.db"), {});
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "server_cpu"), 2 * kS);
  EXPECT_EQ(part_ns(*r.accounting, "server_wait:Lock"), 16 * kS);  // all 160 ASH rows
  ASSERT_EQ(r.windows.size(), 10u);
  // The server's first second (its t0 + 5 s) is the client's first window.
  EXPECT_EQ(r.windows.front().top_wait_event.value_or(""), "Lock:transactionid");
  EXPECT_EQ(r.windows.front().top_wait_event_samples, 20);
  EXPECT_DOUBLE_EQ(r.windows.front().cpu_busy_pct.value_or(-1), 10.0);
  ASSERT_TRUE(r.clock);
  EXPECT_EQ(r.clock->estimates, 2);
  EXPECT_EQ(r.clock->offset_ns, 5 * kS);
  EXPECT_EQ(r.clock->uncertainty_ns, 250'000);
  const auto j = to_json(r);
  EXPECT_EQ(j["clock"]["offset_ns"], 5 * kS);
  EXPECT_EQ(j["clock"]["uncertainty_ns"], 250'000);
  EXPECT_EQ(j["clock"]["applied"], true);
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("clock     server - client +5000.000 ms +/- 0.250 ms"),
            std::string::npos)
      << text.str();
}

TEST(CorrelatePair, WithoutAnEstimateTheServerTimesAreUnshiftedAndTheOutputSaysSo) {
  test::TempDir dir;
  write_pair(dir.file("client.db"), dir.file("server.db"), 5);
  auto client = schema::Store::open_readwrite(dir.file("client.db"));
  auto r = explain_pair(client, dir.file("server.db"), {});
  ASSERT_TRUE(r.accounting);
  // Only the server's ASH polls at its t0 .. t0 + 5 s fall in the queries' span.
  EXPECT_EQ(part_ns(*r.accounting, "server_wait:Lock"), 10 * kS);
  EXPECT_FALSE(r.windows.front().top_wait_event);
  ASSERT_TRUE(r.clock);
  EXPECT_EQ(r.clock->estimates, 0);
  EXPECT_FALSE(r.clock->offset_ns);
  EXPECT_NE(r.notes.front().find("holds no clock-offset estimate"), std::string::npos);
  EXPECT_EQ(to_json(r)["clock"]["applied"], false);
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("no clock-offset estimate in the run file"), std::string::npos);
}

TEST(CorrelateCompare, StatesThePoolersThroughputCostAgainstTheDirectRun) {
  Report pooled, direct;
  pooled.run.tps = 6120.4;
  pooled.run.queries = 61204;
  pooled.accounting = Accounting{};
  pooled.accounting->path_cpu_by_comm_ns = {{"pgbouncer", 9 * kS}};
  direct.run.tps = 9840;
  direct.run.queries = 98400;
  const auto c = compare_runs(pooled, "pooled.db", direct, "direct.db");
  EXPECT_EQ(c.summary, "through pgbouncer: 6,120 tps vs 9,840 tps direct (-38%)");
  EXPECT_NEAR(*c.tps_ratio, 6120.4 / 9840, 1e-12);
  EXPECT_EQ(c.baseline.path, "direct.db");
  pooled.comparison = c;
  const auto j = to_json(pooled);
  EXPECT_EQ(j["comparison"]["summary"], c.summary);
  EXPECT_EQ(j["comparison"]["baseline"]["tps"], 9840.0);
  // Two runs without a pooler are told apart by their file names.
  const auto plain = compare_runs(direct, "a.db", direct, "b.db");
  EXPECT_EQ(plain.summary, "a.db: 9,840 tps vs 9,840 tps b.db (+0%)");
}

TEST(CorrelatePair, NonOverlappingFilesAreAOneLineUsageError) {
  test::TempDir dir;
  write_pair(dir.file("client.db"), dir.file("server.db"), 3600);
  auto client = schema::Store::open_readwrite(dir.file("client.db"));
  try {
    (void)explain_pair(client, dir.file("server.db"), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    const std::string what = e.what();
    EXPECT_NE(what.find("do not overlap"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace stallscope::correlate
