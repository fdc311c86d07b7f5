// explain's passes on values, without a run file: each pass is handed the
// rows and lookups explain.cpp would read through schema/ (row_source.h).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "correlate/detail.h"
#include "correlate/network.h"
#include "correlate/passes.h"
#include "correlate/pg_stats_facts.h"
#include "support/test_support.h"

namespace stallscope::correlate::detail {
namespace {

using test::kMs;
using test::kS;

// Two windows of 1 s from t = 10 s.
WindowIndex two_windows() {
  return WindowIndex{
      .starts_ns = {10 * kS, 11 * kS}, .ends_ns = {11 * kS, 12 * kS}, .uniform_ns = kS};
}

schema::HostTick cpu_tick(std::int64_t time_ns, std::int64_t busy_ns, std::int64_t idle_ns) {
  return {.time_ns = time_ns,
          .sampler_cpu_ns = 1 * kMs,
          .has_host = true,
          .procs_running = 3,
          .has_cpu = true,
          .busy_ns = busy_ns,
          .idle_ns = idle_ns};
}

// A tick's CPU deltas cover the interval before it: a tick at a window's
// start counts in the window before; a tick past the span counts nowhere.
TEST(HostPass, ATickCountsInTheWindowBeforeItsTime) {
  const std::vector<schema::HostTick> ticks = {
      cpu_tick(10 * kS + 500 * kMs, 300 * kMs, 700 * kMs),
      cpu_tick(11 * kS, 100 * kMs, 900 * kMs),  // ends window 0
      cpu_tick(11 * kS + 500 * kMs, 800 * kMs, 200 * kMs),
      cpu_tick(12 * kS + 1, 999 * kMs, 1 * kMs),  // after the span
  };
  std::vector<WindowAcc> acc(2);
  add_host_ticks(rows_of(ticks), two_windows(), acc);
  EXPECT_EQ(acc[0].host.busy_ns, 400 * kMs);
  EXPECT_EQ(acc[0].host.total_ns, 2000 * kMs);
  EXPECT_EQ(acc[0].host.cpu_rows, 2);
  EXPECT_EQ(acc[0].sampler_cpu_ns, 2 * kMs);
  EXPECT_EQ(acc[1].host.busy_ns, 800 * kMs);
  EXPECT_EQ(acc[1].host.cpu_rows, 1);
  EXPECT_EQ(acc[1].host.procs_running_max, 3);
}

// The first tick has no CPU deltas: its run queue counts, its CPU does not.
TEST(HostPass, TheFirstTickWithoutDeltasCountsOnlyItsGauges) {
  auto first = cpu_tick(10 * kS + 100 * kMs, 0, 0);
  first.has_cpu = false;
  first.procs_running = 7;
  const std::vector<schema::HostTick> ticks = {first};
  std::vector<WindowAcc> acc(2);
  add_host_ticks(rows_of(ticks), two_windows(), acc);
  EXPECT_EQ(acc[0].host.procs_running_max, 7);
  EXPECT_EQ(acc[0].host.cpu_rows, 0);
  EXPECT_EQ(acc[0].host.total_ns, 0);
}

// Lost connections and failed reconnects over the span: the codes counted
// apart, the first loss's start and the last one's end, its message.
TEST(OutageFacts, LostQueriesAndFailedConnectsAreCountedApart) {
  const ConnectionErrorLookups lookups{
      [](std::int64_t, std::int64_t) {
        return std::vector<schema::SqlstateCount>{{"08001", 5}, {"57P01", 2}, {"08006", 1}};
      },
      [](std::int64_t, std::int64_t) {
        return std::vector<schema::ConnectionLoss>{
            {.start_ns = 3 * kS,
             .latency_ns = 10 * kMs,
             .sqlstate = "57P01",
             .error = "terminated"},
            {.start_ns = 2 * kS, .latency_ns = 2 * kS, .sqlstate = "08001", .error = ""},
        };
      }};
  const auto o = outage_facts(lookups, Span{1 * kS, 9 * kS});
  EXPECT_EQ(o.lost_queries, 3);
  EXPECT_EQ(o.connect_failures, 5);
  EXPECT_EQ(o.sqlstates, "08001 ×5, 57P01 ×2, 08006 ×1");
  EXPECT_EQ(o.top_lost_sqlstate, "57P01");
  EXPECT_EQ(o.first_ns, 2 * kS);
  EXPECT_EQ(o.last_ns, 4 * kS);
  EXPECT_EQ(o.last_error, "terminated");
}

// Without a lost connection the losses are not looked up at all.
TEST(OutageFacts, NoErrorsLooksUpNoLosses) {
  bool looked_up = false;
  const ConnectionErrorLookups lookups{
      [](std::int64_t, std::int64_t) { return std::vector<schema::SqlstateCount>{}; },
      [&](std::int64_t, std::int64_t) {
        looked_up = true;
        return std::vector<schema::ConnectionLoss>{};
      }};
  const auto o = outage_facts(lookups, Span{1 * kS, 9 * kS});
  EXPECT_EQ(o.lost_queries + o.connect_failures, 0);
  EXPECT_FALSE(looked_up);
}

// A backend that lived less than kShortLivedBackendNs is short-lived; one
// never sampled counts as sampled only if it has a tick.
TEST(ConnectionFacts, ShortLivedBackendsAreThoseSampledForLessThanTheThreshold) {
  ConnectionInputs in{.opened = {.connections = 3, .connect_latency_ns = 6 * kMs},
                      .first_query_gap_ns = 2 * kMs};
  in.backends = {{.process_id = 1, .start_ns = 0, .last_sample_time_ns = kShortLivedBackendNs - 1},
                 {.process_id = 2, .start_ns = 0, .last_sample_time_ns = kShortLivedBackendNs},
                 {.process_id = 3, .start_ns = 0, .last_sample_time_ns = std::nullopt}};
  const auto c = connection_facts(in);
  EXPECT_EQ(c.connections, 3);
  EXPECT_EQ(c.connect_latency_ns, 6 * kMs);
  EXPECT_EQ(c.first_query_gap_ns, 2 * kMs);
  EXPECT_EQ(c.sampled_backends, 3);
  EXPECT_EQ(c.short_lived_backends, 1);
}

// The server named by the conninfo: hostaddr before host, 5432 by default,
// a Unix-socket directory as it is.
TEST(NetworkFacts, ThePeerIsTheConninfosHostAndPort) {
  EXPECT_EQ(network_facts(std::nullopt, std::nullopt, "host=db1 hostaddr=10.0.0.5 dbname=x").peer,
            "10.0.0.5:5432");
  EXPECT_EQ(network_facts(std::nullopt, std::nullopt, "host=db1 port=6432").peer, "db1:6432");
  EXPECT_EQ(network_facts(std::nullopt, std::nullopt, "host=/run/postgresql").peer,
            "/run/postgresql");
  EXPECT_EQ(network_facts(std::nullopt, std::nullopt, std::nullopt).peer, "");
}

// Standbys summed over their polls, most polls first; a synchronous standby
// the setting lists but no poll saw is named as missing.
TEST(PgStatsFacts, StandbysAreSummedAndAMissingSyncStandbyIsNamed) {
  PgStatsInputs in;
  in.settings["synchronous_standby_names"] = {.setting = "FIRST 1 (s1, \"gone\")"};
  auto row = [](const char* name, std::int64_t flush_lag_ns) {
    schema::PgReplicationRow r;
    r.application_name = name;
    r.sync_state = "sync";
    r.flush_lag_ns = flush_lag_ns;
    return r;
  };
  in.replication = {row("s2", 1 * kMs), row("s1", 5 * kMs), row("s1", 3 * kMs)};
  const auto p = pg_stats_facts(std::move(in));
  ASSERT_EQ(p.standbys.size(), 2u);
  EXPECT_EQ(p.standbys[0].name, "s1");
  EXPECT_EQ(p.standbys[0].polls, 2);
  EXPECT_EQ(p.standbys[0].flush_lag_max_ns, 5 * kMs);
  EXPECT_EQ(p.standbys[0].client_addr, "local");
  EXPECT_EQ(p.standbys[1].name, "s2");
  EXPECT_EQ(p.missing_sync_standbys, std::vector<std::string>{"gone"});
}

// The query text of the id with the most on-CPU rows; id 0 (no query id)
// never counts.
TEST(TopCpuQuery, TheIdWithTheMostOnCpuRowsIsLookedUp) {
  Facts f;
  f.ash_cpu_query_rows = {{0, 100}, {7, 10}, {9, 30}};
  std::vector<std::int64_t> asked;
  name_top_cpu_query(
      [&](std::int64_t id) -> std::optional<std::string> {
        asked.push_back(id);
        return "SELECT " + std::to_string(id);
      },
      f);
  EXPECT_EQ(asked, std::vector<std::int64_t>{9});
  EXPECT_EQ(f.top_cpu_query, "SELECT 9");
  EXPECT_EQ(f.top_cpu_query_rows, 30);
}

// The query scan's reads, from vectors: the file is named only in errors.
struct QueryFile {
  std::vector<schema::QueryTiming> queries;
  std::vector<schema::QueryKey> error_keys;
  std::vector<schema::QuerySleep> sleeps;
  std::vector<schema::ConnectionLossKey> loss_keys;
  QueryReads reads() const {
    return {.path = "t.db",
            .cut_ns = INT64_MAX,
            .queries = rows_of(queries),
            .error_keys = rows_of(error_keys),
            .sleeps = rows_of(sleeps),
            .loss_keys = rows_of(loss_keys),
            .queries_after = [](std::int64_t) { return std::int64_t{0}; },
            .query_rows = [this] { return static_cast<std::int64_t>(queries.size()); }};
  }
};

// Failed queries are joined by key; a failed reconnect attempt is no query
// but the client's time without a server.
TEST(QueryScan, ErrorsAndFailedConnectsAreJoinedByKey) {
  QueryFile file;
  for (int i = 0; i < 4; ++i)
    file.queries.push_back(
        {.start_ns = 10 * kS + i * 100 * kMs, .latency_ns = 10 * kMs, .client_id = 0, .seq = i});
  file.error_keys = {{10 * kS + 100 * kMs, 0, 1}, {10 * kS + 300 * kMs, 0, 3}};
  file.loss_keys = {{.key = {10 * kS + 300 * kMs, 0, 3}, .connect_failed = true}};
  Report report;
  report.run.end_ns = 20 * kS;
  EXPECT_EQ(scan_queries(file.reads(), ExplainOptions{}, report), 1);
  EXPECT_EQ(report.run.queries, 3);
  EXPECT_EQ(report.run.errors, 1);
  EXPECT_EQ(report.run.connect_failures, 1);
}

// A row out of key order is a damaged file, named.
TEST(QueryScan, ARowOutOfKeyOrderIsADamagedFile) {
  QueryFile file;
  file.queries = {{.start_ns = 2 * kS, .latency_ns = kMs, .client_id = 0, .seq = 1},
                  {.start_ns = 1 * kS, .latency_ns = kMs, .client_id = 0, .seq = 0}};
  Report report;
  report.run.end_ns = 3 * kS;
  try {
    scan_queries(file.reads(), ExplainOptions{}, report);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot read t.db: the file is damaged (query table: a row out of key order)");
  }
}

// A run without an end keeps its queries up to the earliest of the clients'
// latest, but never more than a second before the latest.
TEST(QueryScan, AnUnfinishedRunIsCutAtTheClientsEarliestLatestQuery) {
  RunSummary run;
  const auto latest = [](std::int64_t clients, std::int64_t earliest, std::int64_t last) {
    return [=] { return schema::LatestQueries{clients, earliest, last}; };
  };
  EXPECT_EQ(query_scan_cut_ns(run, latest(2, 8 * kS, 9 * kS - 1)), 8 * kS);
  EXPECT_EQ(query_scan_cut_ns(run, latest(2, 1 * kS, 9 * kS)), 8 * kS);
  EXPECT_EQ(query_scan_cut_ns(run, latest(1, 1 * kS, 9 * kS)), INT64_MAX);
  run.end_ns = 10 * kS;
  EXPECT_EQ(query_scan_cut_ns(run,
                              []() -> schema::LatestQueries {
                                ADD_FAILURE()
                                    << "a finished run's queries are not scanned for the cut";
                                return {};
                              }),
            INT64_MAX);
}

// Behind a pooler the driver's backend pids are the pooler's: no process
// has them, a process named pgbouncer is taken as the path, and the server's
// client backends become this run's backends.
TEST(QueryPath, DriverBackendPidsMatchingNoProcessFindThePooler) {
  ProcessLookups file{
      .find_driver_process = [](int, std::optional<std::int64_t>,
                                std::int64_t) { return std::optional<std::int64_t>(1); },
      .driver_backends =
          [] {
            return std::vector<schema::DriverBackend>{{4000, std::nullopt}};
          },
      .latest_with_pid = [](int,
                            std::optional<std::int64_t>) { return std::optional<std::int64_t>(); },
      .sampled_processes_named =
          [](const std::string& comm, std::int64_t, std::int64_t) {
            return comm == "pgbouncer" ? std::vector<schema::ProcessComm>{{7, "pgbouncer"}}
                                       : std::vector<schema::ProcessComm>{};
          },
      .pooled_client_backends =
          [](std::int64_t, std::int64_t) {
            return std::vector<schema::ProcessPid>{{11, 5001}, {12, 5002}};
          },
  };
  RunRow run;
  std::vector<std::string> notes;
  const auto qp = find_query_path(
      file, {.run = run, .options = ExplainOptions{}, .span = {0, kS}, .has_queries = true}, notes);
  EXPECT_EQ(qp.driver_process_id, 1);
  EXPECT_TRUE(qp.driver_backends_unsampled);
  ASSERT_EQ(qp.middle_processes.size(), 1u);
  EXPECT_EQ(qp.middle_processes.at(7), "pgbouncer");
  EXPECT_EQ(qp.backend_process_ids, (std::unordered_set<std::int64_t>{11, 12}));
  EXPECT_EQ(qp.backend_pids, (std::unordered_set<int>{5001, 5002}));
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("pgbouncer taken as part of the query path"), std::string::npos)
      << notes[0];
}

// The sweep merges a backend's overlapping queries and counts a -R query
// from when it was sent, on rows from a vector.
TEST(QuerySweep, ABackendsBusyTimeIsTheUnionOfItsQueries) {
  const std::vector<schema::ClientBackend> clients = {{0, 0, 300}};
  BackendMap map(rows_of(clients), [] { return true; });
  const auto key = std::int64_t{0} << 24;  // client 0, connection 0
  const std::vector<schema::QuerySend> sends = {
      {.start_ns = 0, .sent_ns = 0, .answered_ns = 10 * kMs, .key = key},
      {.start_ns = 5 * kMs, .sent_ns = 5 * kMs, .answered_ns = 20 * kMs, .key = key},
      {.start_ns = 30 * kMs, .sent_ns = 35 * kMs, .answered_ns = 40 * kMs, .key = key},
  };
  QuerySweep sweep(rows_of(sends), map);
  sweep.advance_to(kS);
  const int slot = map.slot_of_pid(300);
  EXPECT_EQ(sweep.busy_ns(slot, 0, 100 * kMs), (20 + 5) * kMs);
  EXPECT_EQ(sweep.busy_ns(slot, 30 * kMs, 35 * kMs), 0);  // not yet sent
  sweep.finish();
  EXPECT_EQ(sweep.joined(), 3);
}

}  // namespace
}  // namespace stallscope::correlate::detail
