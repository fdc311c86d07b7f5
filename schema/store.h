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
#include <vector>

#include <SQLiteCpp/Database.h>

#include "common/error.h"
#include "schema/records.h"

namespace stallscope::schema {

// Schema version this build writes and reads (PRAGMA user_version). 2: a
// failed query's sqlstate and error moved from `query` to query_error, and
// skipped transactions to query_skipped. 3: the tables pg_session,
// pg_session_idle (idle sessions, run-length encoded) and record_client.
// 4: run.rate_tps (run -R). 5: run.machine_id and run.boot_id (the host's
// identity beside its name), client.local_addr and client.local_port. Files of versions 2 to 4 are
// read (the readers of what they lack find none: no rows, a NULL rate, no ids); files of version 1
// are refused.
inline constexpr int kSchemaVersion = 5;
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

class Store;

// Why `store`'s file cannot be written through its connection, as a phrase
// ("run.db cannot be written (Read-only file system)", "its directory runs
// cannot be written (Permission denied)"); nullopt when it can.
std::optional<std::string> read_only_reason(Store& store);
// The size of the -wal file beside a file read as an immutable file (its
// commits were not read: the -wal file could not be read); nullopt when the
// WAL was read or there is none.
std::optional<std::int64_t> unread_wal_bytes(Store& store);
// SQLite's PRAGMA quick_check(max_messages) of the run file at `path`, on a
// connection of its own (read-only, as open_readonly): every page of every
// table and index read once, their structure checked (O(file size), about
// 0.3 s per 100 MB). Returns SQLite's descriptions of what is wrong, at most
// max_messages; empty when the file is sound. Throws Error as open_readonly
// (a file too damaged to open).
std::vector<std::string> quick_check(const std::string& path, int max_messages = 3);

namespace detail {
// The file: URIs open_readonly opens `path` with (every connection is
// opened with SQLITE_OPEN_URI, so ATTACH takes them too): "mode=ro", or
// "immutable=1" when no -wal file is beside it; "mode=ro&vfs=unix-none",
// for a WAL read without a -shm file (the connection must be put in
// EXCLUSIVE locking mode before its first read: SQLite then keeps the WAL
// index in its own memory, and unix-none's locks, which are no-ops, let it
// take the exclusive lock on a file open read-only); and "immutable=1"
// alone.
std::string readonly_uri(const std::string& path);
std::string private_wal_index_uri(const std::string& path);
std::string immutable_uri(const std::string& path);
// Whether an SQLite (extended) result code is a refusal to open or read a
// file for a reason of its place (SQLITE_READONLY, SQLITE_CANTOPEN: a
// read-only directory or mount, another user's file), not of its content:
// the cue to try the next of the URIs above.
bool is_place_error(int sqlite_code);
}  // namespace detail

// Whether `e` is SQLite's SQLITE_CORRUPT or SQLITE_NOTADB, in any extended
// form: the file is damaged.
bool is_damaged(const Error& e);
// What a failed statement named that the file lacks, from SQLite's "no such
// table: main.ash_tick" or "no such column: wait_event": "table ash_tick",
// "column wait_event"; nullopt for any other error.
std::optional<std::string> missing_schema_object(const Error& e);
// Whether `e` is SQLite's failure to write the file for a reason of its
// place: SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_PERM, SQLITE_FULL or
// SQLITE_IOERR, in any extended form.
bool is_unwritable(const Error& e);
// Whether `e` is SQLite's refusal of a row whose primary key (or a unique
// column) is already in its table: SQLITE_CONSTRAINT_PRIMARYKEY or
// SQLITE_CONSTRAINT_UNIQUE.
bool is_duplicate_key(const Error& e);
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
  // Opens an existing run file for reading; checks user_version. A file
  // without a -wal file beside it (nobody has it open for writing; every
  // commit is in the file) is read as an immutable file (SQLite's
  // immutable=1: no WAL index, no locks), so that no -wal or -shm file is
  // left beside it. With a -wal file the WAL is read as usual; when this
  // user cannot create or write its WAL index (-shm) — a killed run's file
  // copied without its -shm into a read-only directory or mount, another
  // user's file — the WAL is read through an index in this connection's
  // memory, without locks (no writer can be at work: a writer keeps the
  // -shm file beside it). Only when the -wal file cannot be read either is
  // the file read as an immutable file, without the WAL's commits
  // (unread_wal_bytes() says how many bytes).
  static Store open_readonly(const std::string& path);
  // The same connection alone, for a reader on another thread
  // (schema/attribution_readers.h QuerySendScan). Throws as open_readonly.
  static std::unique_ptr<SQLite::Database> open_readonly_database(const std::string& path);
  // Opens an existing run file for reading and writing (explain writes its
  // results back); checks user_version.
  static Store open_readwrite(const std::string& path);
  // open_readwrite, or open_readonly when the file cannot be written (mode
  // 0444 for this user, a read-only directory or mount); read_only_reason()
  // then says why. Throws as open_readwrite.
  static Store open_readwrite_if_possible(const std::string& path);

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
  void prepare_statements();            // stmts_, once the schema exists (store_write.cpp)
  void write_rows(const Batch& batch);  // every table but query; inside write()'s transaction
  void write_queries(std::span<const Batch> batches);
  std::unique_ptr<SQLite::Database> db_;
  std::string path_;
  std::unique_ptr<Statements> stmts_;  // prepared once, reset per row
};

}  // namespace stallscope::schema
