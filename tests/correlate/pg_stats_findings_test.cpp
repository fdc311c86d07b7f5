// The correlator on hand-made run files with exact numbers (run_fixture.h):
// PostgreSQL statistics in the findings: replication_wait naming the standby, server_cpu's setting
// culprits (JIT, work_mem).
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

// The stats poll of second i (t0 + i s, i = 0..10), with `walsenders`.
void stats_samples(Fixture& fx, std::int64_t walsenders,
                   const std::function<void(int, schema::PgStatsSampleRow&)>& fill = {}) {
  for (int i = 0; i <= 10; ++i) {
    schema::PgStatsSampleRow row{
        .time_ns = kT0 + i * kS, .duration_ns = kMs, .walsenders = walsenders};
    if (fill) fill(i, row);
    fx.batch().pg_stats.samples.push_back(row);
  }
}

void setting(Fixture& fx, const std::string& name, const std::string& value,
             const std::optional<std::string>& unit = std::nullopt) {
  fx.batch().pg_stats.settings.push_back(
      {.name = name, .setting = value, .unit = unit, .time_ns = kT0 - kS});
}

TEST(CorrelateFinding, ReplicationWaitNamesTheSynchronousStandby) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 100);
  fx.rows(kBackendId[1], 100);
  fx.ash(kBackendPid[0], "IPC", "SyncRep", 80);
  fx.ash(kBackendPid[1], "IPC", "SyncRep", 80);
  setting(fx, "synchronous_standby_names", "standby1");
  setting(fx, "synchronous_commit", "on");
  stats_samples(fx, 1);
  for (int i = 0; i <= 10; ++i) {
    fx.batch().pg_stats.replication.push_back({.time_ns = kT0 + i * kS,
                                               .pid = 900,
                                               .application_name = "standby1",
                                               .client_addr = "127.0.0.1",
                                               .state = "streaming",
                                               .sync_state = "sync",
                                               .flush_lag_ns = 5 * kMs,
                                               .flush_behind_bytes = i * 200 * 1024,
                                               .reply_age_ns = i * 420 * kMs});
  }
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  const auto& x = r.findings[0];
  EXPECT_EQ(to_string(x.kind), "replication_wait");
  // 160 ASH rows × 100 ms = 16 s of 20 s of query time.
  EXPECT_DOUBLE_EQ(x.score, 0.8);
  EXPECT_EQ(x.culprit,
            "standby 'standby1' (127.0.0.1): state streaming, sync_state sync, flush lag up to 5 "
            "ms, last reply up to 4.2 s old, up to 2.0 MiB of WAL unconfirmed");
  EXPECT_EQ(evidence<std::int64_t>(x, "ash_samples"), 160);
  EXPECT_EQ(evidence<std::string>(x, "synchronous_standby_names"), "standby1");
  EXPECT_EQ(evidence<std::string>(x, "standby_1"), "standby1 (127.0.0.1, streaming, sync)");
  EXPECT_EQ(evidence<std::int64_t>(x, "standby_1_flush_behind_max_bytes"), 2000 * 1024);
  EXPECT_NE(x.suggestion.find("synchronous_commit = local"), std::string::npos);
  // IPC:SyncRep is not a kernel wait any more.
  EXPECT_EQ(finding(r, "kernel_wait"), nullptr);
  EXPECT_EQ(to_string(*r.verdict.kind), "replication_wait");
}

TEST(CorrelateFinding, ReplicationWaitNamesAStandbyThatIsNotConnected) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 100);
  fx.rows(kBackendId[1], 100);
  fx.ash(kBackendPid[0], "IPC", "SyncRep", 100);
  fx.ash(kBackendPid[1], "IPC", "SyncRep", 100);
  setting(fx, "synchronous_standby_names", "FIRST 1 (standby1, \"b-2\")");
  stats_samples(fx, 0);
  auto r = fx.explain();
  const auto* x = finding(r, "replication_wait");
  ASSERT_NE(x, nullptr);
  EXPECT_DOUBLE_EQ(x->score, 1.0);
  EXPECT_EQ(x->culprit,
            "standby 'standby1' named in synchronous_standby_names but not connected; standby "
            "'b-2' named in synchronous_standby_names but not connected");
  EXPECT_EQ(evidence<std::int64_t>(*x, "polls_without_walsender"), 11);
}

TEST(CorrelateFinding, ReplicationWaitWithoutStatisticsStillRanksTheWait) {
  // A file without the pg_stats tables (made before they existed).
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.ash(kBackendPid[0], "IPC", "SyncRep", 50);
  fx.store().db().exec(
      "DROP TABLE pg_setting; DROP TABLE pg_stats_sample; DROP TABLE pg_replication_sample; "
      "DROP TABLE pg_statement_sample; DROP TABLE pg_statement_text");
  auto r = fx.explain();
  const auto* x = finding(r, "replication_wait");
  ASSERT_NE(x, nullptr);
  EXPECT_DOUBLE_EQ(x->score, 0.25);
  EXPECT_EQ(x->culprit, "");
}

TEST(CorrelateFinding, SyncStandbyNamesReadsEveryForm) {
  using detail::sync_standby_names;
  EXPECT_EQ(sync_standby_names(""), std::vector<std::string>{});
  EXPECT_EQ(sync_standby_names("a"), std::vector<std::string>{"a"});
  EXPECT_EQ(sync_standby_names("a, b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(sync_standby_names("FIRST 1 (a, \"B c\")"), (std::vector<std::string>{"a", "B c"}));
  EXPECT_EQ(sync_standby_names("ANY 2 (x,y,z)"), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(sync_standby_names("2 (s1, s2)"), (std::vector<std::string>{"s1", "s2"}));
  EXPECT_EQ(sync_standby_names("*"), std::vector<std::string>{"*"});
}

// The ServerCpuRanksFirst fixture: backends saturate the host.
void busy_backends(Fixture& fx) {
  fx.host({.user_ms = 1700, .system_ms = 200, .idle_ms = 100, .procs_running = 9});
  fx.rows(kDriverId, 300, 100);
  fx.rows(kBackendId[0], 800, 300);
  fx.rows(kBackendId[1], 800, 300);
  fx.ash(kBackendPid[0], std::nullopt, std::nullopt, 90);
}

TEST(CorrelateFinding, ServerCpuNamesJitFromPgStatStatements) {
  Fixture fx;
  busy_backends(fx);
  setting(fx, "jit", "on");
  setting(fx, "jit_above_cost", "0");
  stats_samples(fx, 0);
  // Snapshots at t0 − 1 s (every entry) and t0 + 11 s: query 7 ran 1,000
  // times for 10 s of execution, 3 s of it generating and 2 s emitting JIT
  // code; query 8 appeared later (counted from 0) with 1 s and no JIT.
  auto& st = fx.batch().pg_stats.statements;
  st.push_back({.time_ns = kT0 - kS,
                .query_id = 7,
                .calls = 5,
                .total_exec_time_ns = 0,
                .jit_generation_time_ns = 0,
                .jit_inlining_time_ns = 0,
                .jit_optimization_time_ns = 0,
                .jit_emission_time_ns = 0});
  st.push_back({.time_ns = kT0 + 11 * kS,
                .query_id = 7,
                .calls = 1005,
                .total_exec_time_ns = 10 * kS,
                .jit_generation_time_ns = 3 * kS,
                .jit_inlining_time_ns = 0,
                .jit_optimization_time_ns = 0,
                .jit_emission_time_ns = 2 * kS,
                .query = "SELECT sum(n) FROM small"});
  st.push_back({.time_ns = kT0 + 11 * kS,
                .query_id = 8,
                .calls = 1000,
                .total_exec_time_ns = 1 * kS,
                .jit_generation_time_ns = 0});
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  const auto& x = r.findings[0];
  EXPECT_EQ(to_string(x.kind), "server_cpu");
  // 5 s of JIT against 11 s of planning and execution (JIT code is
  // generated outside what pgss counts as execution): 5 / 16 = 31 %; 5 s
  // over 2,000 calls.
  EXPECT_EQ(x.culprit,
            "jit = on, jit_above_cost = 0: JIT compiled 31% of backend time (pg_stat_statements: "
            "2.500 ms of JIT per call)");
  EXPECT_DOUBLE_EQ(evidence<double>(x, "jit_share"), 0.3125);
  EXPECT_EQ(evidence<std::int64_t>(x, "pgss_calls"), 2000);
  EXPECT_EQ(x.suggestion.rfind("JIT compilation costs more", 0), 0u);
}

TEST(CorrelateFinding, ServerCpuNamesWorkMemFromTempBytesWithoutPgStatStatements) {
  Fixture fx;
  busy_backends(fx);
  setting(fx, "work_mem", "64", "kB");
  // 4 MiB of temp files a second, 2 files and 10 transactions a second.
  stats_samples(fx, 0, [](int i, schema::PgStatsSampleRow& row) {
    row.xact_commit = 10 * i;
    row.temp_files = 2 * i;
    row.temp_bytes = i * 4 * 1024 * 1024;
  });
  auto r = fx.explain();
  const auto* x = finding(r, "server_cpu");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->culprit,
            "work_mem = 64kB: queries spilled 4.0 MiB/s to temp files (0.4 MiB per transaction, "
            "20 files)");
  EXPECT_EQ(evidence<std::int64_t>(*x, "transactions"), 100);
  EXPECT_DOUBLE_EQ(evidence<double>(*x, "temp_bytes_per_xact"), 419430.4);
}

TEST(CorrelateFinding, ServerCpuKeepsNoSettingCulpritBelowTheThresholds) {
  Fixture fx;
  busy_backends(fx);
  setting(fx, "work_mem", "4096", "kB");
  stats_samples(fx, 0, [](int i, schema::PgStatsSampleRow& row) {
    row.xact_commit = 10 * i;
    row.temp_bytes = i * 1024;  // 1 kB/s: no spill worth naming
  });
  auto r = fx.explain();
  const auto* x = finding(r, "server_cpu");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->culprit.find("work_mem"), std::string::npos) << x->culprit;
}

}  // namespace
}  // namespace stallscope::correlate
