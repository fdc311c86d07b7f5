// The run file: a SQLite database in WAL mode holding schema/v1.sql.
//
//   auto store = schema::Store::create("run.db");   // new file, mode 0600
//   store.begin_run(info);
//   store.write(batch);                              // one transaction
//   store.end_run(wall_now_ns(), "complete", "duration reached");
//
//   auto db = schema::Store::open_readonly("run.db"); // for explain
//   auto run = schema::read_run(db);                  // schema/run_reader.h
//
// Errors: Error(usage) for a path that cannot be created or opened, a file
// that is not a stallscope run file, or one from a newer schema version;
// Error(sqlite) for failures while writing, naming the file, SQLite's message
// and, when SQLite kept one, the system error underneath ("cannot write to
// run.db: database or disk is full"; "… disk I/O error (No space left on
// device)"). schema's readers throw
// SqliteError (below) for a failed read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <SQLiteCpp/Database.h>

#include "common/error.h"
#include "schema/records.h"

namespace stallscope::schema {

// Schema version this build writes and reads (PRAGMA user_version). 2: a
// failed query's sqlstate and error moved from `query` to query_error, and
// skipped transactions to query_skipped. 3: the tables pg_session,
// pg_session_idle (idle sessions, run-length encoded) and record_client.
// Files of version 2 are read (the readers of those tables find none);
// files of version 1 are refused.
inline constexpr int kSchemaVersion = 3;
// The oldest version this build reads.
inline constexpr int kOldestReadableSchemaVersion = 2;

// What schema's readers throw when SQLite fails (a bad table, a locked file,
// a failed step): kind sqlite, code() SQLite's extended result code, what()
// SQLite's message alone — the caller says what it was doing, e.g.
//   catch (const schema::SqliteError& e) {
//     throw Error(ErrorKind::sqlite, "cannot read run.db: " + std::string(e.what()), e.code());
//   }
class SqliteError : public Error {
 public:
  SqliteError(std::string message, int extended_code)
      : Error(ErrorKind::sqlite, std::move(message), extended_code) {}
};

// Whether `e` is SQLite's SQLITE_BUSY ("database is locked": another
// connection holds the write lock), in any extended form.
bool is_busy(const Error& e);

class Store {
 public:
  // Creates `path` (must not exist; "-" is refused), mode 0600, WAL,
  // synchronous=NORMAL, and applies the schema. ":memory:" gives an
  // in-memory store for tests. When that fails (e.g. a full disk:
  // Error(sqlite) "cannot create run.db: database or disk is full") the
  // file is removed again, with the -wal, -shm and -journal it made.
  static Store create(const std::string& path);
  // Opens an existing run file for reading; checks user_version. A file in
  // WAL mode whose WAL index this user cannot create or write (another
  // user's file, a read-only directory or mount) is opened as an immutable
  // file (SQLite's immutable=1: no WAL index, no locks) — right for a file
  // nobody writes any more, and the only way to read it without writing.
  static Store open_readonly(const std::string& path);
  // The same connection alone, for a reader on another thread
  // (schema/attribution_readers.h QuerySendScan). Throws as open_readonly.
  static std::unique_ptr<SQLite::Database> open_readonly_database(const std::string& path);
  // Opens an existing run file for reading and writing (explain writes its
  // results back); checks user_version.
  static Store open_readwrite(const std::string& path);

  // Moving empties the source. Prepared statements are finalised before the
  // connection closes (SQLite refuses to close a connection that has them).
  Store(Store&&) noexcept;
  Store& operator=(Store&& other) noexcept;
  ~Store();

  // Inserts the single `run` row with status 'running'.
  void begin_run(const RunInfo& info);
  // Sets end_ns, status and end_reason of the run row (rolling back first
  // a transaction a failed write() left open).
  // `command_exit_status`: exit status of `record -- COMMAND`, if any.
  void end_run(std::int64_t end_ns, const std::string& status, const std::string& end_reason,
               std::optional<int> command_exit_status = std::nullopt);
  // PRAGMA wal_checkpoint(TRUNCATE): copies the WAL into the file and
  // empties it (the writer's last resort on a full disk). Error(sqlite).
  void truncate_wal();
  // The errno underneath SQLite's last failure on this connection
  // (sqlite3_system_errno), 0 when none, e.g. EFBIG past RLIMIT_FSIZE.
  int system_errno() const;

  // Inserts every row of `batch` in one transaction.
  void write(const Batch& batch);
  // Inserts every row of all `batches` in one transaction, as write() of
  // their concatenation would (the writer's commit, without copying rows).
  // Query rows go in in key order (start_ns, client_id, seq) over all of
  // them, so the table, clustered by that key, is appended to.
  void write(std::span<const Batch> batches);

  // The connection, for schema's readers and writers and for tests that
  // look at a file's tables directly; correlate/ and tools/ use the typed
  // readers (run_reader.h, sample_readers.h, ...) instead.
  SQLite::Database& db() { return *db_; }
  const std::string& path() const { return path_; }

 private:
  Store(std::unique_ptr<SQLite::Database> db, std::string path);
  struct Statements;
  void write_rows(const Batch& batch);  // every table but query; inside write()'s transaction
  void write_queries(std::span<const Batch> batches);
  std::unique_ptr<SQLite::Database> db_;
  std::string path_;
  std::unique_ptr<Statements> stmts_;  // prepared once, reset per row
};

}  // namespace stallscope::schema
