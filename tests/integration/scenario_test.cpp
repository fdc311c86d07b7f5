// Scenario tests: each runs one script of tools/scenarios/ — which starts its
// own scratch server, reproduces one cause by construction, runs `stallscope
// run` and `explain --json` — and asserts that the script's verdict check
// passed: the expected kind ranked first, its culprit named, and none of the
// forbidden kinds (lib.sh's SCENARIO_FORBIDDEN) raised where absent. Exit status 77 means the
// machine cannot run the scenario (no loop device, cgroups not writable): the test skips with the
// script's reason.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace stallscope::test {
namespace {

std::string scenario_path(const std::string& name) {
  const char* dir = std::getenv("STALLSCOPE_SOURCE_DIR");
  return std::string(dir ? dir : STALLSCOPE_SOURCE_DIR_DEFAULT) + "/tools/scenarios/" + name;
}

// Runs a scenario script with this build's stallscope. With
// STALLSCOPE_SCENARIO_LOGS set (tools/test), its output and exit status also
// go to <dir>/<name>.log, for tools/scenarios/score --from.
CommandResult run_script(const std::string& name) {
  ::setenv("STALLSCOPE_BIN", stallscope_bin().c_str(), 1);
  auto r = run_command({scenario_path(name)});
  if (const char* logs = std::getenv("STALLSCOPE_SCENARIO_LOGS")) {
    std::filesystem::create_directories(logs);
    std::ofstream(std::filesystem::path(logs) / (name + ".log"))
        << r.out << "exit status: " << r.exit_status << "\n";
  }
  return r;
}

// Runs the scenario and asserts its verdict; its stdout goes to *out.
void run_scenario(const std::string& name, const std::string& expected_kind,
                  std::string* out = nullptr) {
  auto r = run_script(name);
  if (r.exit_status == 77) {
    auto reason = r.out.empty() ? r.err : r.out;
    GTEST_SKIP() << name << " cannot run here: " << reason;
  }
  EXPECT_EQ(r.exit_status, 0) << name << " stdout:\n" << r.out << "\nstderr:\n" << r.err;
  // The script prints what it checked; the expected kind must be first.
  EXPECT_NE(r.out.find("expected: " + expected_kind + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ranked: " + expected_kind + "="), std::string::npos) << r.out;
  // explain wrote the same verdict into the run file's finding table.
  EXPECT_NE(r.out.find("stored: " + expected_kind + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verdict: ok"), std::string::npos) << r.out;
  // Every scenario names its culprit (scenario_expect_culprit in the script).
  EXPECT_NE(r.out.find("culprit named: yes"), std::string::npos) << r.out;
  if (out) *out = r.out;
}

TEST(Scenario, RowLockIsLockWait) {
  std::string out;
  run_scenario("row-lock", "lock_wait", &out);
  if (IsSkipped()) return;
  // Holders change every few ms: the hot row is named, not a holder.
  EXPECT_NE(out.find("culprit: the hot row of relation hot"), std::string::npos) << out;
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
}

TEST(Scenario, Seed000With8ClientsIsServerCpuWithoutWaits) {
  std::string out;
  run_scenario("seed-000-c8", "server_cpu", &out);
  if (IsSkipped()) return;
  for (const char* kind : {"io_wait=", "lock_wait=", "steal=", "cpu_throttle="}) {
    EXPECT_EQ(out.find(kind), std::string::npos) << kind << " raised:\n" << out;
  }
}

TEST(Scenario, CpuHogIsRunqueueNamingTheHogs) {
  std::string out;
  run_scenario("cpu-hog", "runqueue", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("blamed: cpuhog"), std::string::npos) << out;
}

TEST(Scenario, Seed000WithAConnectionPerTransactionIsConnectionSetup) {
  std::string out;
  run_scenario("seed-000-connect", "connection_setup", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("evidence: connections_per_s="), std::string::npos) << out;
}

TEST(Scenario, Seed003ThrottledWalIsIoWait) {
  std::string out;
  run_scenario("seed-003", "io_wait", &out);
  if (IsSkipped()) return;
  // The evidence names the WAL flush: an IO/WALWrite wait event or a D-state wchan.
  EXPECT_NE(out.find("evidence: "), std::string::npos) << out;
  EXPECT_TRUE(out.find("WAL") != std::string::npos || out.find("top_wchan=-") == std::string::npos)
      << out;
}

TEST(Scenario, CpuQuotaIsCpuThrottle) {
  run_scenario("cpu-quota", "cpu_throttle");
}

TEST(Scenario, Seed000With1ClientBehindADelayIsNetworkRoundtrip) {
  run_scenario("seed-000-c1", "network_roundtrip");
}

// Seed 000's own question: one client over a Unix socket on an idle host.
// Nothing saturates; the clients wait for every answer.
TEST(Scenario, Seed000With1ClientOnAnIdleHostIsLatencyBound) {
  std::string out;
  run_scenario("seed-000-c1-local", "latency_bound", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("clients ÷ latency: "), std::string::npos) << out;
  EXPECT_NE(out.find("parts add up: ok"), std::string::npos) << out;
}

TEST(Scenario, Seed000With1ClientThroughPgbouncerIsLatencyBound) {
  run_scenario("seed-000-pgbouncer-c1", "latency_bound");
}

// A script that fails every time (an undefined column): the failure is the
// answer, not the CPUs it keeps busy.
TEST(Scenario, ARunWhoseScriptAlwaysFailsIsErrors) {
  run_scenario("run-failing-script", "errors");
}

// The same reading beside pgbench -c 1 under record: the throughput from
// pg_stat_database, the latency derived.
TEST(Scenario, RecordOfPgbenchWith1ClientIsLatencyBound) {
  run_scenario("record-pgbench-c1", "latency_bound");
}

TEST(Scenario, NagleBehindDelayedAcksIsNetworkStackNamingTcpNodelay) {
  std::string out;
  // A proxy without TCP_NODELAY writing each message in two pieces: ~40 ms a
  // query in the TCP stack, not on the wire.
  run_scenario("nagle-delayed-ack", "network_stack", &out);
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
  EXPECT_NE(out.find("delayed ACKs"), std::string::npos) << out;
}

TEST(Scenario, Seed000ThroughPgbouncerGivesThePoolerItsOwnLine) {
  std::string out;
  // 16 clients queue for 4 server connections held mostly for the hop
  // through pgbouncer: the time waiting in it (--pooler-admin) ranks first.
  run_scenario("seed-000-pgbouncer", "pool_wait", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("pooler accounting: path_cpu:pgbouncer"), std::string::npos) << out;
  // --pooler-admin: the time queries waited in pgbouncer for one of its 4
  // server connections is its own line (the script fails when it is 0).
  EXPECT_NE(out.find("pooler wait: path_wait:pgbouncer "), std::string::npos) << out;
  EXPECT_NE(out.find("pool_wait: 0."), std::string::npos) << out;
  EXPECT_NE(out.find("throughput: pooled "), std::string::npos) << out;
  // explain pooled.db direct.db states the pooler's cost against the direct run.
  EXPECT_NE(out.find("explain compared: through pgbouncer: "), std::string::npos) << out;
  EXPECT_NE(out.find(" tps direct ("), std::string::npos) << out;
}

// Runs a scenario that checks its own verdict (scenario_check_verdict or
// its own checks) and returns its stdout; "" when it skipped.
std::string run_checked(const std::string& name) {
  auto r = run_script(name);
  if (r.exit_status == 77) return "";
  EXPECT_EQ(r.exit_status, 0) << name << " stdout:\n" << r.out << "\nstderr:\n" << r.err;
  EXPECT_NE(r.out.find("parts add up: ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verdict: ok"), std::string::npos) << r.out;
  return r.out;
}

TEST(Scenario, FixedRateHealthyIsNoBottleneckWithTheClientsIdleShare) {
  const auto out = run_checked("fixed-rate-healthy");
  if (out.empty()) GTEST_SKIP();
  EXPECT_NE(out.find("verdict kind: none\n"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict reason: paced\n"), std::string::npos) << out;
  EXPECT_NE(out.find("idle share: 0."), std::string::npos) << out;
}

TEST(Scenario, FixedRateBacklogIsLockWaitWithTheScheduleLagAsAPart) {
  const auto out = run_checked("fixed-rate-backlog");
  if (out.empty()) GTEST_SKIP();
  EXPECT_NE(out.find("verdict kind: lock_wait\n"), std::string::npos) << out;
  EXPECT_NE(out.find("ranked: lock_wait="), std::string::npos) << out;
  EXPECT_NE(out.find("schedule lag share: 0."), std::string::npos) << out;
  EXPECT_NE(out.find("culprit: the hot row of relation hot"), std::string::npos) << out;
}

TEST(Scenario, ThinkTimeIsTheClientsIdleShareNotAPart) {
  const auto out = run_checked("think-time");
  if (out.empty()) GTEST_SKIP();
  EXPECT_NE(out.find("verdict kind: none\n"), std::string::npos) << out;
  EXPECT_NE(out.find("idle share: 0.9"), std::string::npos) << out;
}

// record beside an application with think time: the client asleep by
// choice is its own part and the verdict is no bottleneck.
TEST(Scenario, RecordOfAnApplicationWithThinkTimeIsNoBottleneck) {
  const auto out = run_checked("record-think-time");
  if (out.empty()) GTEST_SKIP();
  EXPECT_NE(out.find("verdict kind: none\n"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict reason: paced\n"), std::string::npos) << out;
  EXPECT_NE(out.find("client asleep by choice: 0."), std::string::npos) << out;
}

// The same think time inside an asyncio event loop (epoll_wait with the
// loop's 10 ms timer, not nanosleep): still no bottleneck, never round trips.
TEST(Scenario, RecordOfAnAsyncioApplicationWithThinkTimeIsNoBottleneck) {
  const auto out = run_checked("record-asyncio-think-time");
  if (out.empty()) GTEST_SKIP();
  EXPECT_NE(out.find("verdict kind: none\n"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict reason: paced\n"), std::string::npos) << out;
  EXPECT_NE(out.find("client asleep by choice: 0."), std::string::npos) << out;
}

// An application server waiting for its own requests (select on its
// listening socket) and an asyncio server that keeps its idle database
// connection registered in its loop: waiting for other input (client_idle),
// no bottleneck, never round trips.
TEST(Scenario, RecordOfAnApplicationServerWaitingForItsRequestsIsNoBottleneck) {
  for (const char* name : {"record-http-app-idle", "record-asyncio-server-idle"}) {
    const auto out = run_checked(name);
    if (out.empty()) GTEST_SKIP();
    EXPECT_NE(out.find("verdict kind: none\n"), std::string::npos) << name << out;
    EXPECT_NE(out.find("verdict reason: paced\n"), std::string::npos) << name << out;
    EXPECT_NE(out.find("application waiting for its requests: 0."), std::string::npos)
        << name << out;
  }
}

// record beside a multi-threaded client whose 8 threads queue on one lock
// (a log lock held for 2 ms a write): kernel_wait on the client's side,
// python3 asleep on a futex — read from its threads' rows, not its main
// thread's (asleep in join).
TEST(Scenario, RecordOfThreadsQueuedOnOneLockIsKernelWaitOnAFutex) {
  run_scenario("record-threads-one-lock", "kernel_wait");
}

// record beside a client blocked writing its log to a slow pipe (seed 003's
// logging, on the client): kernel_wait naming the client and the pipe.
TEST(Scenario, RecordOfAClientBlockedOnItsLogPipeIsKernelWait) {
  run_scenario("record-client-log-pipe", "kernel_wait");
}

// Seed 000's shape: three CPU-bound application workers behind pgbouncer on
// one host. The application is the client, not pgbouncer (a hop).
TEST(Scenario, RecordOfCpuBoundWorkersBehindPgbouncerNamesTheApplication) {
  run_scenario("record-pgbouncer-python", "client_cpu");
}

// A pre-fork server's four workers over a Unix socket: one culprit for the
// command, with its worker count.
TEST(Scenario, RecordOfAPreforkServerNamesItsWorkersAsOneCommand) {
  run_scenario("record-prefork-workers", "client_cpu");
}

TEST(Scenario, FullStopIsAStallOnTheWindowWithNoAnswerExplainedAsLockWait) {
  const auto out = run_checked("full-stop");
  if (out.empty()) GTEST_SKIP();
  EXPECT_NE(out.find("stall on the stopped window: lock_wait"), std::string::npos) << out;
  // The stall names the session holding the table lock, not a waiting client.
  EXPECT_NE(out.find("stall culprit: pid "), std::string::npos) << out;
  EXPECT_NE(out.find("LOCK TABLE django_site"), std::string::npos) << out;
}

// The lock scenarios: each names its culprit (the script's
// scenario_expect_culprit; "culprit named: yes" is printed only on a match).
TEST(Scenario, AdvisoryLockTurnstileNamesTheAdvisoryKey) {
  std::string out;
  run_scenario("advisory-turnstile", "lock_wait", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("culprit: advisory lock (0, 21)"), std::string::npos) << out;
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
}

TEST(Scenario, NotifyInEveryTransactionNamesTheNotifyQueueLock) {
  std::string out;
  run_scenario("notify-commit", "lock_wait", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("culprit: the NOTIFY queue lock"), std::string::npos) << out;
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
}

TEST(Scenario, IdleInTransactionSessionIsNamedAsTheRootBlocker) {
  std::string out;
  run_scenario("idle-in-transaction", "lock_wait", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find(" idle in transaction for "), std::string::npos) << out;
  EXPECT_NE(out.find("app 'batch'"), std::string::npos) << out;
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
}

TEST(Scenario, RelationLockQueueBehindDdlNamesTheDdlAndItsBlocker) {
  std::string out;
  run_scenario("ddl-queue", "lock_wait", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("app 'report'"), std::string::npos) << out;
  EXPECT_NE(out.find("ALTER TABLE django_site"), std::string::npos) << out;
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
}

// record-python-client accepts either client kind: single_thread when the
// interpreter reaches a full core, client_cpu on a host too busy for that.
TEST(Scenario, RecordOfAPythonClientNamesTheInterpreter) {
  auto r = run_script("record-python-client");
  if (r.exit_status == 77) GTEST_SKIP() << "record-python-client cannot run here: " << r.out;
  ASSERT_EQ(r.exit_status, 0) << r.out << "\nstderr:\n" << r.err;
  const bool single = r.out.find("ranked: single_thread=") != std::string::npos;
  const bool client = r.out.find("ranked: client_cpu=") != std::string::npos;
  EXPECT_TRUE(single || client) << r.out;
  EXPECT_NE(r.out.find(single ? "stored: single_thread\n" : "stored: client_cpu\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("first: The client python3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("found by command"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verdict: ok"), std::string::npos) << r.out;
}

// record -- pgbench -c 8 gives the verdict run -c 8 gives: server_cpu.
TEST(Scenario, RecordOfPgbenchWith8ClientsIsServerCpuLikeRun) {
  std::string out;
  run_scenario("record-pgbench", "server_cpu", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("run -c 8: server_cpu\n"), std::string::npos) << out;
  EXPECT_NE(out.find("client: pgbench"), std::string::npos) << out;
}

// The server's stderr into a pipe whose reader stops (logging_collector off,
// log_statement = 'all'): backends block writing their log lines, active with
// no wait event in PostgreSQL, asleep on the pipe in the kernel.
TEST(Scenario, LogPipeFullIsKernelWaitNamingThePipe) {
  std::string out;
  run_scenario("log-pipe-full", "kernel_wait", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("culprit: backends asleep in "), std::string::npos) << out;
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
  EXPECT_NE(out.find("false alarms: 0"), std::string::npos) << out;
}

// sync-rep: commits wait for a standby whose WAL receiver was
// stopped; replication_wait names it, and IPC:SyncRep is not kernel_wait.
TEST(Scenario, SyncRepToAStoppedStandbyIsReplicationWaitNamingTheStandby) {
  std::string out;
  run_scenario("sync-rep", "replication_wait", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("culprit: standby 'standby1'"), std::string::npos) << out;
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
  EXPECT_EQ(out.find("kernel_wait="), std::string::npos) << out;
}

// jit-cheap-queries: server_cpu, its culprit the JIT setting (pg_stat_statements).
TEST(Scenario, JitOnCheapQueriesIsServerCpuNamingJit) {
  std::string out;
  run_scenario("jit-cheap-queries", "server_cpu", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("culprit: jit = on, jit_above_cost = 0: JIT compiled"), std::string::npos)
      << out;
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
}

// temp-spill: server_cpu on this VM, its culprit work_mem.
TEST(Scenario, TempSpillIsServerCpuNamingWorkMem) {
  std::string out;
  run_scenario("temp-spill", "server_cpu", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("culprit: work_mem = 64kB: queries spilled"), std::string::npos) << out;
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
}

// fpw-checkpoint: io_wait on this VM, its culprit full_page_writes.
TEST(Scenario, FullPageWritesAfterCheckpointsNameFullPageWrites) {
  std::string out;
  run_scenario("fpw-checkpoint", "io_wait", &out);
  if (IsSkipped()) return;
  EXPECT_NE(out.find("culprit: full_page_writes = on: "), std::string::npos) << out;
  EXPECT_NE(out.find("culprit named: yes"), std::string::npos) << out;
}

}  // namespace
}  // namespace stallscope::test
