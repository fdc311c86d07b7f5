// Helpers shared by the tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/units.h"
#include "schema/records.h"

namespace stallscope::test {

// Durations and times in ns for hand-made inputs (common/units.h's).
inline constexpr std::int64_t kS = common::kNsPerS;
inline constexpr std::int64_t kMs = common::kNsPerMs;

// A directory under /tmp removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // path() / name, as a string.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A thread-safe sink (driver::Sink, sampler::Sink) that keeps every row it
// is given; the accessors return copies.
// A transaction as the driver reported it: a query row with its query_error
// row joined in (sqlstate, error), or a query_skipped row (skipped; its lag
// as latency_ns and lag_ns, no rows, no connection).
struct Transaction : schema::QueryRow {
  std::optional<std::string> sqlstate;  // nullopt = success
  std::optional<std::string> error;
  bool skipped = false;
};

class Collected {
 public:
  std::function<void(schema::Batch)> sink();
  int batches() const;
  // Every transaction, ordered by (client_id, seq).
  std::vector<Transaction> queries() const;
  // The transactions of one client, in seq order.
  std::vector<Transaction> queries(int client_id) const;
  std::map<int, std::vector<Transaction>> by_client() const;
  std::vector<schema::ClientRow> clients() const;
  // Transactions cut short at the run's end, ordered by (client_id, seq).
  std::vector<schema::QueryUnfinishedRow> unfinished() const;
  // The backend pid that served `q`: its client's connection row's pid.
  std::optional<int> backend_pid(const schema::QueryRow& q) const;
  std::vector<schema::AshTickRow> ash_ticks() const;
  std::vector<schema::PgActivityRow> activity() const;
  std::vector<schema::PgSessionRow> sessions() const;
  std::vector<schema::PgSessionIdleRow> idle_stretches() const;
  schema::PgStatsRows pg_stats() const;  // PostgreSQL statistics (AshSampler)

 private:
  mutable std::mutex mu_;
  int batches_ = 0;
  schema::Batch all_;
};

// Conninfo of the scratch server the ctest fixture started (read from the
// file named by STALLSCOPE_TEST_CONNINFO_FILE). Fails the test (ADD_FAILURE)
// and returns "" when there is none: integration tests never skip.
std::string scratch_conninfo();

// Path of the stallscope binary under test (STALLSCOPE_BIN).
std::string stallscope_bin();

#ifdef STALLSCOPE_SOURCE_DIR_DEFAULT
// The repository's root (STALLSCOPE_SOURCE_DIR, else the one built from):
// the integration tests' way to tools/ and docs/.
inline std::string source_dir() {
  const char* dir = std::getenv("STALLSCOPE_SOURCE_DIR");
  return dir ? dir : STALLSCOPE_SOURCE_DIR_DEFAULT;
}
#endif

// Result of running a command.
struct CommandResult {
  int exit_status = -1;  // exit code, or 128+signal
  std::string out;       // stdout
  std::string err;       // stderr
};

// Runs argv (no shell), capturing stdout and stderr; waits for it.
CommandResult run_command(const std::vector<std::string>& argv);

// Starts argv (argv[0] looked up in PATH, or a path; no shell) without
// waiting, its output going where the test's goes; its pid, or -1.
int spawn(std::vector<std::string> argv);
// Waits for a spawned pid; whether it exited with status 0.
bool exited_ok(int pid);

// Runs one SQL string against `conninfo` with libpq; ADD_FAILURE on error.
// Returns the first column of the first row, or "" when there is none.
std::string psql(const std::string& conninfo, const std::string& sql);

// A run's header for hand-made run files: mode "run", host "db1", kernel
// "6.1.0", 2 cores, 100 ticks/s, 10 Hz, stallscope pid 100, -c 2 -j 1, simple
// protocol, "SELECT 1", started at `start_ns`. Tests change what they test.
schema::RunInfo run_info(std::int64_t start_ns = 1'000);

}  // namespace stallscope::test
