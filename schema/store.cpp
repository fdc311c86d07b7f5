#include "schema/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <tuple>
#include <vector>

#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <fmt/format.h>

#include "common/error.h"
#include "common/fd.h"
#include "common/units.h"
#include "schema/bind.h"
#include "schema/row.h"
#include "schema/schema_sql.h"
#include "schema/tick_rows.h"

namespace stallscope::schema {
using detail::bind_opt;
namespace {

void run_row(SQLite::Statement& st) {
  st.exec();
  st.reset();
  st.clearBindings();
}

int read_user_version(SQLite::Database& db) {
  return db.execAndGet("PRAGMA user_version").getInt();
}

// SQLite's message, with the system error underneath when there is one,
// e.g. "disk I/O error (No space left on device)". SQLite keeps it only for
// some failures (not, as measured, for a WAL write past RLIMIT_FSIZE at
// COMMIT: "disk I/O error" alone).
std::string with_system_error(SQLite::Database& db, const std::string& message) {
  const int err = sqlite3_system_errno(db.getHandle());
  if (err == 0) return message;
  return fmt::format("{} ({})", message, std::strerror(err));
}

// SQLite's reason a file could not be read: a file SQLite could not take
// as a database ("file is not a database") is not a run file; anything else
// (no permission to create the WAL index beside it, ...) is said as it is.
[[noreturn]] void throw_unreadable(const std::string& path, const SQLite::Exception& e) {
  const int primary = e.getErrorCode();
  if (primary == SQLITE_CORRUPT) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot read {}: the file is damaged ({})", path, e.what()),
                e.getExtendedErrorCode());
  }
  if (primary == SQLITE_NOTADB) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot read {}: not a stallscope run file ({})", path, e.what()),
                e.getExtendedErrorCode());
  }
  throw Error(ErrorKind::usage, fmt::format("cannot read {}: {}", path, e.what()),
              e.getExtendedErrorCode());
}

// When `path`'s -wal is there, not empty and cannot be opened for reading
// (a run killed before its first checkpoint keeps everything in it): why,
// for the error; "" otherwise.
std::string unreadable_wal(const std::string& path) {
  const std::string wal = path + "-wal";
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(wal, ec);
  if (ec || bytes == 0) return {};
  if (common::Fd fd(::open(wal.c_str(), O_RDONLY | O_CLOEXEC)); fd) return {};
  return fmt::format(
      "its data ({} bytes) is in {}, which cannot be read ({}): give read access "
      "to it",
      bytes, wal, std::strerror(errno));
}

void check_run_file(SQLite::Database& db, const std::string& path) {
  int version = 0;
  bool has_run = false;
  try {
    version = read_user_version(db);
    has_run = db.tableExists("run");
    // A read of a table: a WAL file's first one needs its WAL index (-shm).
    if (has_run) db.execAndGet("SELECT count(*) FROM run");
  } catch (const SQLite::Exception& e) {
    throw_unreadable(path, e);
  }
  if (version > kSchemaVersion) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot read {}: schema version {} is newer than this stallscope "
                            "understands ({}); upgrade stallscope",
                            path, version, kSchemaVersion));
  }
  if (version >= 1 && version < kOldestReadableSchemaVersion && has_run) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot read {}: schema version {} is older than this stallscope "
                            "reads ({}); record or import it again",
                            path, version, kOldestReadableSchemaVersion));
  }
  if (version < 1 || !has_run) {
    if (const auto why = unreadable_wal(path); !why.empty())
      throw Error(ErrorKind::usage, fmt::format("cannot read {}: {}", path, why));
    throw Error(ErrorKind::usage, fmt::format("cannot read {}: not a stallscope run file", path));
  }
}

// A file: URI for `path` (%, ? and # escaped) with `query` ("immutable=1",
// "mode=ro") after it, if any. Every connection is opened through one, so
// that a path starting with "file:" is still a path.
std::string file_uri(const std::string& path, std::string_view query = {}) {
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      uri += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    } else {
      uri += c;
    }
  }
  if (!query.empty()) uri += fmt::format("?{}", query);
  return uri;
}

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// A read-only connection to a WAL file creates the -wal and -shm files
// beside it when they are not there, and cannot remove them when it closes.
// Without a -wal file nobody has the file open for writing (a WAL writer
// keeps it from its first read to its last close) and every commit is in
// the file itself, so it is read as an immutable file: no WAL index, no
// locks, nothing created beside it. With one, the WAL is read as usual.
}  // namespace

std::string detail::readonly_uri(const std::string& path) {
  return file_uri(path, exists(path + "-wal") ? "mode=ro" : "immutable=1");
}

std::string detail::private_wal_index_uri(const std::string& path) {
  return file_uri(path, "mode=ro&vfs=unix-none");
}

std::string detail::immutable_uri(const std::string& path) {
  return file_uri(path, "immutable=1");
}

bool detail::is_place_error(int sqlite_code) {
  const int primary = sqlite_code & 0xff;
  return primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN;
}

namespace {

constexpr int kBusyTimeoutMs = 5000;

// How open_checked reads a WAL: through the WAL index in the -shm file
// beside it (SQLite's usual way), or through one built in this
// connection's memory (for a -wal file with no -shm that this user may
// create: see private_wal_index_uri).
enum class WalIndex { shared, private_to_connection };

std::unique_ptr<SQLite::Database> open_checked(const std::string& path, const std::string& uri,
                                               int flags, WalIndex wal_index = WalIndex::shared) {
  // NOMUTEX: a Store belongs to one thread at a time, so SQLite's per-call
  // connection mutex is pure cost (≈ 10 % of explain's long scans).
  auto db = std::make_unique<SQLite::Database>(uri, flags | SQLite::OPEN_NOMUTEX | SQLite::OPEN_URI,
                                               kBusyTimeoutMs);
  if (wal_index == WalIndex::private_to_connection) {
    // Before the first read: SQLite then builds the WAL index in heap
    // memory, and never checkpoints into a file it only reads.
    db->exec("PRAGMA locking_mode=EXCLUSIVE");
    sqlite3_db_config(db->getHandle(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  }
  check_run_file(*db, path);
  return db;
}

std::unique_ptr<SQLite::Database> open_existing(const std::string& path, int flags) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw Error(ErrorKind::usage, fmt::format("cannot open {}: no such file", path), ENOENT);
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(ErrorKind::usage, fmt::format("cannot open {}: is a directory", path), EISDIR);
  }
  // A FIFO (or `<(…)`), a socket or a device: SQLite would block on a FIFO
  // for ever, and none of them holds a run.
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot open {}: not a regular file (a run file is one)", path),
                EINVAL);
  }
  const bool readonly = (flags & SQLite::OPEN_READWRITE) == 0;
  try {
    if (!readonly) return open_checked(path, file_uri(path), flags);
    try {
      return open_checked(path, detail::readonly_uri(path), flags);
    } catch (const Error& e) {
      if (!detail::is_place_error(e.code())) throw;
    }
    // A WAL file with a -wal file but no WAL index (-shm) that this user
    // may create (a killed run's file copied to a read-only directory or
    // mount without its -shm, another user's file): its WAL is read through
    // an index of this connection's own.
    try {
      return open_checked(path, detail::private_wal_index_uri(path), flags,
                          WalIndex::private_to_connection);
    } catch (const Error& e) {
      if (!detail::is_place_error(e.code())) throw;
    }
    // The -wal file cannot even be read: as an immutable file, without the
    // WAL's commits (unread_wal_bytes() says how many bytes).
    return open_checked(path, detail::immutable_uri(path), flags);
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::usage, fmt::format("cannot open {}: {}", path, e.what()),
                e.getExtendedErrorCode());
  }
}

// Query rows a multi-row INSERT of write_queries() carries: about 0.5 µs a
// row instead of 0.85 µs one by one (measured; little gain beyond 32).
constexpr int kQueryRowsPerInsert = 32;
constexpr int kQueryColumns = 7;

// INSERT of `rows` query rows.
std::string query_sql(int rows) {
  std::string sql =
      "INSERT INTO query (start_ns, client_id, seq, latency_ns, connection, rows, lag_ns) VALUES ";
  for (int i = 0; i < rows; ++i) sql += i == 0 ? "(?,?,?,?,?,?,?)" : ",(?,?,?,?,?,?,?)";
  return sql;
}

// Binds a query row to parameters first .. first + 6 of a query_sql()
// statement.
void bind_query(Cursor& st, int first, const QueryRow& r) {
  st.bind(first, r.start_ns);
  st.bind(first + 1, r.client_id);
  st.bind(first + 2, r.seq);
  st.bind(first + 3, r.latency_ns);
  bind_opt(st, first + 4, r.connection);
  bind_opt(st, first + 5, r.rows);
  bind_opt(st, first + 6, r.lag_ns);
}

void run_cursor(Cursor& st) {
  st.step();
  st.reset();
}
}  // namespace

struct Store::Statements {
  explicit Statements(SQLite::Database& db)
      : sample(db, "INSERT INTO sample VALUES (?,?,?,?,?,?)"),
        host_sample(db, "INSERT INTO host_sample VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        process(db,
                "INSERT INTO process (process_id, pid, start_ticks, start_ns, ppid, comm, cmdline, "
                "first_sample_id, cgroup) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (process_id) DO "
                "UPDATE SET ppid = excluded.ppid, comm = excluded.comm, cmdline = "
                "excluded.cmdline, cgroup = excluded.cgroup"),
        ash_tick(db, "INSERT INTO ash_tick VALUES (?,?,?)"),
        pg_activity(db,
                    "INSERT INTO pg_activity_sample (time_ns, ash_tick, pid, backend_type, state, "
                    "wait_event_type, wait_event, application_name, query_id, query_text_id, "
                    "client_addr, client_port, backend_start_ns, xact_start_ns, query_start_ns, "
                    "state_change_ns, blocking_pids) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        client(db, "INSERT OR REPLACE INTO client VALUES (?,?,?,?,?,?,?)"),
        query_error(db, "INSERT INTO query_error VALUES (?,?,?,?,?)"),
        query_skipped(db, "INSERT INTO query_skipped VALUES (?,?,?,?)"),
        query_sleep(db, "INSERT INTO query_sleep VALUES (?,?,?,?)"),
        query_unfinished(db, "INSERT OR REPLACE INTO query_unfinished VALUES (?,?,?,?,?,?)"),
        pgbench_aggregate(
            db, "INSERT INTO pgbench_aggregate VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        clock_offset(db, "INSERT OR REPLACE INTO clock_offset VALUES (?,?,?,?,?,?)"),
        statement(db, "INSERT OR REPLACE INTO statement VALUES (?,?,?,?)"),
        statement_latency(db, "INSERT OR REPLACE INTO statement_latency VALUES (?,?,?,?,?)"),
        tcp_sample(db, "INSERT OR REPLACE INTO tcp_sample VALUES (?,?,?,?,?,?,?)"),
        pg_session(db, "INSERT OR IGNORE INTO pg_session VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"),
        pg_session_idle(db, "INSERT OR REPLACE INTO pg_session_idle VALUES (?,?,?)"),
        record_client(db, "INSERT INTO record_client VALUES (?,?,?,?)"),
        pooler_sample(db,
                      "INSERT OR REPLACE INTO pooler_sample (time_ns, database, interval_ns, "
                      "xacts, queries, wait_ns, xact_ns, query_ns, cl_active, cl_waiting, "
                      "sv_active, sv_idle, sv_used, maxwait_ns) "
                      "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        pg_stats(db),
        pg_lock_wait(db,
                     "INSERT OR IGNORE INTO pg_lock_wait VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        query(db, query_sql(1).c_str()),
        query_many(db, query_sql(kQueryRowsPerInsert).c_str()),
        depth(db),
        ticks(db) {}
  SQLite::Statement sample, host_sample, process, ash_tick, pg_activity, client, query_error,
      query_skipped, query_sleep, query_unfinished, pgbench_aggregate, clock_offset, statement,
      statement_latency, tcp_sample;
  SQLite::Statement pg_session, pg_session_idle, record_client;  // schema version 3
  SQLite::Statement pooler_sample;                               // --pooler-admin
  // PostgreSQL statistics (PgStatsRows).
  struct PgStats {
    explicit PgStats(SQLite::Database& db)
        : setting(db, "INSERT OR REPLACE INTO pg_setting VALUES (?,?,?,?)"),
          sample(db, "INSERT OR REPLACE INTO pg_stats_sample VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"),
          replication(db,
                      "INSERT OR REPLACE INTO pg_replication_sample VALUES "
                      "(?,?,?,?,?,?,?,?,?,?,?,?)"),
          statement(db,
                    "INSERT OR REPLACE INTO pg_statement_sample VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
          text(db, "INSERT OR IGNORE INTO pg_statement_text VALUES (?,?)") {}
    SQLite::Statement setting, sample, replication, statement, text;
  };
  PgStats pg_stats;
  SQLite::Statement pg_lock_wait;
  // The driver's rows, tens of thousands a second, bound straight through
  // sqlite3_bind_* (Cursor), kQueryRowsPerInsert rows a statement (one
  // statement execution costs about as much as inserting a row); all rows of
  // a commit are put in key order through compact keys.
  Cursor query, query_many;
  struct QueryKey {
    std::int64_t start_ns;
    std::int64_t seq;
    int client_id;
    const QueryRow* row;
  };
  std::vector<QueryKey> query_order;  // reused: its capacity stays
  // The tables the deeper sampling fills: host memory, disks, cgroups, query texts.
  struct Depth {
    explicit Depth(SQLite::Database& db)
        : host_memory(db,
                      "INSERT INTO host_memory_sample VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
          disk(db, "INSERT OR REPLACE INTO disk_sample VALUES (?,?,?,?,?,?,?,?,?,?)"),
          cgroup(db, "INSERT OR REPLACE INTO cgroup_sample VALUES (?,?,?,?,?,?)"),
          query_text(db, "INSERT OR IGNORE INTO pg_query_text VALUES (?,?,?,?)"),
          tcp_stack(db,
                    "INSERT OR REPLACE INTO tcp_stack_sample VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)") {}
    SQLite::Statement host_memory, disk, cgroup, query_text;
    SQLite::Statement tcp_stack;  // tcp_stack_sample
  };
  Depth depth;
  // process_sample / thread_sample rows in their stored form (tick_rows.h).
  detail::TickRowWriter ticks;
};

Store::Store(std::unique_ptr<SQLite::Database> db, std::string path)
    : db_(std::move(db)), path_(std::move(path)) {}

Store::Store(Store&& other) noexcept
    : db_(std::move(other.db_)), path_(std::move(other.path_)), stmts_(std::move(other.stmts_)) {}

Store& Store::operator=(Store&& other) noexcept {
  if (this != &other) {
    stmts_.reset();
    db_ = std::move(other.db_);
    path_ = std::move(other.path_);
    stmts_ = std::move(other.stmts_);
  }
  return *this;
}

Store::~Store() {
  stmts_.reset();
}

Store Store::create(const std::string& path) {
  if (path.empty() || path == "-") {
    throw Error(ErrorKind::usage, "cannot create run file: -o needs a file path");
  }
  const bool memory = path == ":memory:";
  // What this call created, removed again if it fails (a full disk leaves a
  // 0-byte or 4 KiB file otherwise, and the next -o would say "file exists"):
  // the file, and those of its -wal, -shm and -journal that did not exist.
  std::vector<std::string> created;
  if (!memory) {
    // Create the file ourselves, exclusively and mode 0600, so it never
    // exists with looser permissions and an existing run is never clobbered.
    const common::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) {
      int err = errno;
      throw Error(
          ErrorKind::usage,
          fmt::format("cannot create {}: {}", path,
                      err == EEXIST ? "file exists (choose another -o)" : std::strerror(err)),
          err);
    }
    created.push_back(path);
    for (const char* suffix : {"-wal", "-shm", "-journal"}) {
      std::error_code ec;
      if (!std::filesystem::exists(path + suffix, ec) && !ec) created.push_back(path + suffix);
    }
  }
  const auto remove_created = [&created] {
    for (const auto& p : created) {
      std::error_code ec;
      std::filesystem::remove(p, ec);
    }
  };
  try {
    // NOMUTEX: the writer's connection is used by one thread at a time (the
    // writer thread, then the closing thread after join), so SQLite's
    // per-call connection mutex is pure cost (≈ 15 % of the writer's CPU).
    auto db = std::make_unique<SQLite::Database>(
        path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE | SQLite::OPEN_NOMUTEX, 5000);
    try {
      // SQLite gives the -wal and -shm files the database file's mode (0600).
      if (!memory) db->exec("PRAGMA journal_mode=WAL");
      db->exec("PRAGMA synchronous=NORMAL");
      {
        SQLite::Transaction tx(*db);
        db->exec(kSchemaV1Sql);
        db->exec(fmt::format("PRAGMA user_version = {}", kSchemaVersion));
        tx.commit();
      }
    } catch (const SQLite::Exception& e) {
      throw Error(ErrorKind::sqlite,
                  fmt::format("cannot create {}: {}", path, with_system_error(*db, e.what())),
                  e.getExtendedErrorCode());
    }
    Store store(std::move(db), path);
    store.stmts_ = std::make_unique<Statements>(*store.db_);
    return store;
  } catch (const SQLite::Exception& e) {
    remove_created();  // the connection is closed: it was a local of the try block
    throw Error(ErrorKind::sqlite, fmt::format("cannot create {}: {}", path, e.what()),
                e.getExtendedErrorCode());
  } catch (...) {
    remove_created();
    throw;
  }
}

Store Store::open_readonly(const std::string& path) {
  return Store(open_existing(path, SQLite::OPEN_READONLY), path);
}

std::unique_ptr<SQLite::Database> Store::open_readonly_database(const std::string& path) {
  return open_existing(path, SQLite::OPEN_READONLY);
}

Store Store::open_readwrite(const std::string& path) {
  Store store(open_existing(path, SQLite::OPEN_READWRITE), path);
  return store;
}

Store Store::open_readwrite_if_possible(const std::string& path) {
  // Not even tried on a file this user may not write: a connection that
  // SQLite opens read-only would leave -wal and -shm files beside it.
  if (exists(path) && ::access(path.c_str(), W_OK) != 0) return open_readonly(path);
  const bool had_wal = exists(path + "-wal");
  const bool had_shm = exists(path + "-shm");
  try {
    auto db = open_existing(path, SQLite::OPEN_READWRITE);
    // SQLite opens a file it may not write (mode 0444, a read-only mount)
    // read-only without an error; read it as open_readonly does instead.
    if (sqlite3_db_readonly(db->getHandle(), "main") != 1) return Store(std::move(db), path);
  } catch (const Error& e) {
    // No -wal or -shm can be made beside it: a read-only directory, or a
    // full or failing disk (SQLITE_FULL, SQLITE_IOERR), where what SQLite
    // began of them is removed again so that a read-only open can work.
    const int primary = e.code() & 0xff;
    if (primary == SQLITE_FULL || primary == SQLITE_IOERR) {
      std::error_code ec;
      if (!had_wal) std::filesystem::remove(path + "-wal", ec);
      if (!had_shm) std::filesystem::remove(path + "-shm", ec);
    } else if (primary != SQLITE_READONLY && primary != SQLITE_CANTOPEN && primary != SQLITE_PERM) {
      throw;
    }
  }
  return open_readonly(path);
}

std::optional<std::string> read_only_reason(Store& store) {
  sqlite3* db = store.db().getHandle();
  if (sqlite3_db_readonly(db, "main") != 1) return std::nullopt;
  const std::string& path = store.path();
  if (::access(path.c_str(), W_OK) != 0) {
    return fmt::format("{} cannot be written ({})", path, std::strerror(errno));
  }
  const auto dir = std::filesystem::path(path).parent_path();
  const std::string dir_text = dir.empty() ? std::string(".") : dir.string();
  if (::access(dir_text.c_str(), W_OK) != 0) {
    return fmt::format("its directory {} cannot be written ({})", dir_text, std::strerror(errno));
  }
  std::error_code ec;
  if (const auto space = std::filesystem::space(dir_text, ec); !ec && space.available == 0) {
    return fmt::format("the file system under {} is full", path);
  }
  return fmt::format("{} was opened read-only", path);
}

std::optional<std::int64_t> unread_wal_bytes(Store& store) {
  const char* filename = sqlite3_db_filename(store.db().getHandle(), "main");
  if (filename == nullptr || !sqlite3_uri_boolean(filename, "immutable", 0)) return std::nullopt;
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(store.path() + "-wal", ec);
  if (ec || bytes == 0) return std::nullopt;
  return static_cast<std::int64_t>(bytes);
}

std::vector<std::string> quick_check(const std::string& path, int max_messages) {
  auto db = open_existing(path, SQLite::OPEN_READONLY);
  const auto limit = static_cast<std::size_t>(std::max(1, max_messages));
  std::vector<std::string> problems;
  try {
    SQLite::Statement st(*db, fmt::format("PRAGMA quick_check({})", limit));
    while (st.executeStep()) {
      // "ok", or rows of findings; the first may start with a line that
      // names the database ("*** in database main ***\n") and a row may
      // hold several findings, one per line.
      std::string_view text = st.getColumn(0).getText();
      if (text == "ok") continue;
      while (!text.empty()) {
        const auto eol = text.find('\n');
        const auto line = text.substr(0, eol);
        if (!line.empty() && !line.starts_with("*** in database")) problems.emplace_back(line);
        text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
      }
    }
    if (problems.size() > limit) problems.resize(limit);
  } catch (const SQLite::Exception& e) {
    // A page so damaged that the check itself cannot go on.
    problems.emplace_back(e.what());
  }
  return problems;
}

void Store::begin_run(const RunInfo& r) {
  try {
    SQLite::Statement st(*db_,
                         "INSERT INTO run (run_id, mode, status, host, kernel, cores, "
                         "clock_ticks_per_s, start_ns, command_line, conninfo, tool_version, hz, "
                         "stallscope_pid, stallscope_start_ticks, clients, threads, protocol, sql, "
                         "server_version, command, delayacct_set, kernel_stacks) "
                         "VALUES (1,?,'running',?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    int i = 1;
    st.bind(i++, r.mode);
    st.bind(i++, r.host);
    st.bind(i++, r.kernel);
    st.bind(i++, r.cores);
    st.bind(i++, static_cast<int64_t>(r.clock_ticks_per_s));
    st.bind(i++, static_cast<int64_t>(r.start_ns));
    st.bind(i++, r.command_line);
    bind_opt(st, i++, r.conninfo);
    st.bind(i++, r.tool_version);
    st.bind(i++, r.hz);
    st.bind(i++, r.stallscope_pid);
    bind_opt(st, i++, r.stallscope_start_ticks);
    bind_opt(st, i++, r.clients);
    bind_opt(st, i++, r.threads);
    bind_opt(st, i++, r.protocol);
    bind_opt(st, i++, r.sql);
    bind_opt(st, i++, r.server_version);
    bind_opt(st, i++, r.command);
    bind_opt(st, i++, r.delayacct_set);
    bind_opt(st, i++, r.kernel_stacks);
    st.exec();
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite, fmt::format("cannot write run row to {}: {}", path_, e.what()),
                e.getExtendedErrorCode());
  }
}

void Store::end_run(std::int64_t end_ns, const std::string& status, const std::string& end_reason,
                    std::optional<int> command_exit_status) {
  try {
    // A transaction a failed write left open (SQLite keeps it after some
    // I/O errors) is rolled back first, so the UPDATE commits on its own.
    if (sqlite3_get_autocommit(db_->getHandle()) == 0) db_->exec("ROLLBACK");
    SQLite::Statement st(
        *db_, "UPDATE run SET end_ns = ?, status = ?, end_reason = ?, command_exit_status = ?");
    st.bind(1, static_cast<int64_t>(end_ns));
    st.bind(2, status);
    st.bind(3, end_reason);
    bind_opt(st, 4, command_exit_status);
    st.exec();
  } catch (const SQLite::Exception& e) {
    throw Error(
        ErrorKind::sqlite,
        fmt::format("cannot finish run in {}: {}", path_, with_system_error(*db_, e.what())),
        e.getExtendedErrorCode());
  }
}

void Store::truncate_wal() {
  try {
    db_->exec("PRAGMA wal_checkpoint(TRUNCATE)");
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite,
                fmt::format("cannot checkpoint {}: {}", path_, with_system_error(*db_, e.what())),
                e.getExtendedErrorCode());
  }
}

int Store::system_errno() const {
  return sqlite3_system_errno(db_->getHandle());
}

namespace {
// Rows of the sampler depth tables (host_memory_sample, disk_sample,
// cgroup_sample, pg_query_text); inside write()'s transaction.
template <typename Depth>
void write_depth(const Batch& b, Depth& d) {
  for (const auto& r : b.host_memory_samples) {
    auto& st = d.host_memory;
    st.bind(1, static_cast<int64_t>(r.sample_id));
    int i = 2;
    for (const auto* v :
         {&r.psi_cpu_some_us, &r.psi_cpu_full_us, &r.psi_io_some_us, &r.psi_io_full_us,
          &r.psi_memory_some_us, &r.psi_memory_full_us, &r.mem_available_bytes, &r.mem_dirty_bytes,
          &r.mem_writeback_bytes, &r.swap_used_bytes, &r.major_faults, &r.swap_in_pages,
          &r.swap_out_pages, &r.page_in_kib, &r.page_out_kib}) {
      bind_opt(st, i++, *v);
    }
    run_row(st);
  }
  for (const auto& r : b.tcp_stack_samples) {
    auto& st = d.tcp_stack;
    st.bind(1, static_cast<int64_t>(r.sample_id));
    int i = 2;
    for (const auto* v : {&r.span_ns,
                          &r.delayed_acks,
                          &r.delayed_ack_locked,
                          &r.delayed_ack_lost,
                          &r.timeouts,
                          &r.loss_probes,
                          &r.slow_start_retrans,
                          &r.fast_retrans,
                          &r.syn_retrans,
                          &r.zero_window_drop,
                          &r.to_zero_window_adv,
                          &r.want_zero_window_adv,
                          &r.rcvq_drop,
                          &r.listen_overflows,
                          &r.listen_drops,
                          &r.retrans_segs,
                          &r.out_segs,
                          &r.in_segs,
                          &r.in_errs,
                          &r.out_rsts}) {
      bind_opt(st, i++, *v);
    }
    run_row(st);
  }
  for (const auto& r : b.disk_samples) {
    auto& st = d.disk;
    st.bind(1, static_cast<int64_t>(r.sample_id));
    st.bind(2, r.device);
    int i = 3;
    for (std::int64_t v : {r.reads, r.writes, r.read_sectors, r.write_sectors, r.in_flight,
                           r.busy_ns, r.weighted_ns, r.span_ns}) {
      st.bind(i++, static_cast<int64_t>(v));
    }
    run_row(st);
  }
  for (const auto& r : b.cgroup_samples) {
    auto& st = d.cgroup;
    st.bind(1, static_cast<int64_t>(r.sample_id));
    st.bind(2, r.cgroup);
    bind_opt(st, 3, r.nr_periods);
    bind_opt(st, 4, r.nr_throttled);
    bind_opt(st, 5, r.throttled_ns);
    bind_opt(st, 6, r.span_ns);
    run_row(st);
  }
  for (const auto& r : b.pg_query_texts) {
    auto& st = d.query_text;
    st.bind(1, static_cast<int64_t>(r.query_text_id));
    bind_opt(st, 2, r.query_id);
    st.bind(3, r.query);
    st.bind(4, static_cast<int64_t>(r.first_time_ns));
    run_row(st);
  }
}
}  // namespace

void Store::write(const Batch& b) {
  write(std::span<const Batch>(&b, 1));
}

void Store::write(std::span<const Batch> batches) {
  if (!stmts_) stmts_ = std::make_unique<Statements>(*db_);
  try {
    SQLite::Transaction tx(*db_);
    for (const Batch& b : batches) write_rows(b);
    write_queries(batches);
    tx.commit();
  } catch (const SQLite::Exception& e) {
    stmts_->ticks.forget();  // the names it inserted were rolled back
    throw Error(ErrorKind::sqlite,
                fmt::format("cannot write to {}: {}", path_, with_system_error(*db_, e.what())),
                e.getExtendedErrorCode());
  } catch (...) {
    stmts_->ticks.forget();
    throw;
  }
}

void Store::write_queries(std::span<const Batch> batches) {
  auto& s = *stmts_;
  try {
    // In key order, so the table (clustered by start time) is appended to
    // rather than split page by page.
    auto& order = s.query_order;
    order.clear();
    for (const Batch& b : batches) {
      for (const auto& r : b.queries) order.push_back({r.start_ns, r.seq, r.client_id, &r});
    }
    std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) {
      return std::tie(x.start_ns, x.client_id, x.seq) < std::tie(y.start_ns, y.client_id, y.seq);
    });
    std::size_t i = 0;
    for (; i + kQueryRowsPerInsert <= order.size(); i += kQueryRowsPerInsert) {
      for (int k = 0; k < kQueryRowsPerInsert; ++k) {
        bind_query(s.query_many, k * kQueryColumns + 1,
                   *order[i + static_cast<std::size_t>(k)].row);
      }
      run_cursor(s.query_many);
    }
    for (; i < order.size(); ++i) {
      bind_query(s.query, 1, *order[i].row);
      run_cursor(s.query);
    }
  } catch (const SqliteError& e) {
    s.query.reset();  // a failed step leaves the statement to be reset
    s.query_many.reset();
    throw Error(ErrorKind::sqlite, fmt::format("cannot write to {}: {}", path_, e.what()),
                e.code());
  }
}

namespace {
// Binds one row's values to its table's INSERT (Statements), in column order.
void bind_row(SQLite::Statement& st, const SampleRow& r) {
  st.bind(1, static_cast<int64_t>(r.sample_id));
  st.bind(2, static_cast<int64_t>(r.time_ns));
  st.bind(3, static_cast<int64_t>(r.mono_ns));
  bind_opt(st, 4, r.interval_ns);
  st.bind(5, static_cast<int64_t>(r.sampler_cpu_ns));
  st.bind(6, static_cast<int64_t>(r.sampler_duration_ns));
}

void bind_row(SQLite::Statement& st, const HostSampleRow& r) {
  st.bind(1, static_cast<int64_t>(r.sample_id));
  bind_opt(st, 2, r.cpu_user_ns);
  bind_opt(st, 3, r.cpu_nice_ns);
  bind_opt(st, 4, r.cpu_system_ns);
  bind_opt(st, 5, r.cpu_idle_ns);
  bind_opt(st, 6, r.cpu_iowait_ns);
  bind_opt(st, 7, r.cpu_irq_ns);
  bind_opt(st, 8, r.cpu_softirq_ns);
  bind_opt(st, 9, r.cpu_steal_ns);
  st.bind(10, r.load1);
  st.bind(11, r.load5);
  st.bind(12, r.load15);
  st.bind(13, r.procs_running);
  st.bind(14, r.procs_blocked);
  st.bind(15, r.processes_total);
  st.bind(16, r.processes_d_state);
}

void bind_row(SQLite::Statement& st, const ProcessRow& r) {
  st.bind(1, static_cast<int64_t>(r.process_id));
  st.bind(2, r.pid);
  st.bind(3, static_cast<int64_t>(r.start_ticks));
  bind_opt(st, 4, r.start_ns);
  bind_opt(st, 5, r.ppid);
  st.bind(6, r.comm);
  bind_opt(st, 7, r.cmdline);
  st.bind(8, static_cast<int64_t>(r.first_sample_id));
  bind_opt(st, 9, r.cgroup);
}

void bind_row(SQLite::Statement& st, const PgSessionRow& r) {
  st.bind(1, static_cast<int64_t>(r.session_id));
  st.bind(2, r.pid);
  bind_opt(st, 3, r.backend_start_ns);
  bind_opt(st, 4, r.backend_type);
  bind_opt(st, 5, r.application_name);
  bind_opt(st, 6, r.client_addr);
  bind_opt(st, 7, r.client_port);
  bind_opt(st, 8, r.usename);
  bind_opt(st, 9, r.datname);
  st.bind(10, static_cast<int64_t>(r.first_ash_tick));
  bind_opt(st, 11, r.client_pid);
  bind_opt(st, 12, r.client_start_ticks);
}

void bind_row(SQLite::Statement& st, const PgSessionIdleRow& r) {
  st.bind(1, static_cast<int64_t>(r.session_id));
  st.bind(2, static_cast<int64_t>(r.first_ash_tick));
  st.bind(3, static_cast<int64_t>(r.polls));
}

void bind_row(SQLite::Statement& st, const PgLockWaitRow& r) {
  st.bind(1, static_cast<int64_t>(r.ash_tick));
  st.bind(2, r.pid);
  st.bind(3, r.locktype);
  bind_opt(st, 4, r.mode);
  bind_opt(st, 5, r.database_oid);
  bind_opt(st, 6, r.relation_oid);
  bind_opt(st, 7, r.relation_name);
  bind_opt(st, 8, r.page);
  bind_opt(st, 9, r.tuple);
  bind_opt(st, 10, r.virtualxid);
  bind_opt(st, 11, r.transactionid);
  bind_opt(st, 12, r.classid);
  bind_opt(st, 13, r.objid);
  bind_opt(st, 14, r.objsubid);
  bind_opt(st, 15, r.write_relation_name);
}

void bind_row(SQLite::Statement& st, const RecordClientRow& r) {
  st.bind(1, r.source);
  bind_opt(st, 2, r.pid);
  bind_opt(st, 3, r.start_ticks);
  bind_opt(st, 4, r.comm);
}

void bind_row(SQLite::Statement& st, const AshTickRow& r) {
  st.bind(1, static_cast<int64_t>(r.ash_tick));
  st.bind(2, static_cast<int64_t>(r.time_ns));
  st.bind(3, static_cast<int64_t>(r.duration_ns));
}

void bind_row(SQLite::Statement& st, const PgActivityRow& r) {
  st.bind(1, static_cast<int64_t>(r.time_ns));
  st.bind(2, static_cast<int64_t>(r.ash_tick));
  st.bind(3, r.pid);
  bind_opt(st, 4, r.backend_type);
  bind_opt(st, 5, r.state);
  bind_opt(st, 6, r.wait_event_type);
  bind_opt(st, 7, r.wait_event);
  bind_opt(st, 8, r.application_name);
  bind_opt(st, 9, r.query_id);
  bind_opt(st, 10, r.query_text_id);
  bind_opt(st, 11, r.client_addr);
  bind_opt(st, 12, r.client_port);
  bind_opt(st, 13, r.backend_start_ns);
  bind_opt(st, 14, r.xact_start_ns);
  bind_opt(st, 15, r.query_start_ns);
  bind_opt(st, 16, r.state_change_ns);
  bind_opt(st, 17, r.blocking_pids);
}

void bind_row(SQLite::Statement& st, const ClientRow& r) {
  st.bind(1, r.client_id);
  st.bind(2, r.connection);
  st.bind(3, r.thread);
  bind_opt(st, 4, r.backend_pid);
  bind_opt(st, 5, r.connect_ns);
  bind_opt(st, 6, r.connect_latency_ns);
  bind_opt(st, 7, r.application_name);
}

void bind_row(SQLite::Statement& st, const QueryErrorRow& r) {
  st.bind(1, static_cast<int64_t>(r.start_ns));
  st.bind(2, r.client_id);
  st.bind(3, static_cast<int64_t>(r.seq));
  st.bind(4, r.sqlstate);
  bind_opt(st, 5, r.error);
}

void bind_row(SQLite::Statement& st, const QuerySkippedRow& r) {
  st.bind(1, static_cast<int64_t>(r.start_ns));
  st.bind(2, r.client_id);
  st.bind(3, static_cast<int64_t>(r.seq));
  st.bind(4, static_cast<int64_t>(r.lag_ns));
}

void bind_row(SQLite::Statement& st, const QueryUnfinishedRow& r) {
  st.bind(1, static_cast<int64_t>(r.start_ns));
  st.bind(2, r.client_id);
  st.bind(3, static_cast<int64_t>(r.seq));
  st.bind(4, static_cast<int64_t>(r.elapsed_ns));
  bind_opt(st, 5, r.connection);
  bind_opt(st, 6, r.lag_ns);
}

void bind_row(SQLite::Statement& st, const QuerySleepRow& r) {
  st.bind(1, static_cast<int64_t>(r.start_ns));
  st.bind(2, r.client_id);
  st.bind(3, static_cast<int64_t>(r.seq));
  st.bind(4, static_cast<int64_t>(r.sleep_ns));
}

void bind_row(SQLite::Statement& st, const PgbenchAggregateRow& r) {
  st.bind(1, r.file);
  st.bind(2, static_cast<int64_t>(r.line));
  st.bind(3, static_cast<int64_t>(r.interval_start_ns));
  st.bind(4, static_cast<int64_t>(r.transactions));
  st.bind(5, static_cast<int64_t>(r.latency_sum_ns));
  st.bind(6, r.latency_sum2_us2);
  bind_opt(st, 7, r.latency_min_ns);
  bind_opt(st, 8, r.latency_max_ns);
  bind_opt(st, 9, r.lag_sum_ns);
  bind_opt(st, 10, r.lag_sum2_us2);
  bind_opt(st, 11, r.lag_min_ns);
  bind_opt(st, 12, r.lag_max_ns);
  bind_opt(st, 13, r.skipped);
  bind_opt(st, 14, r.retried);
  bind_opt(st, 15, r.retries);
  bind_opt(st, 16, r.serialization_failures);
  bind_opt(st, 17, r.deadlock_failures);
}

void bind_row(SQLite::Statement& st, const ClockOffsetRow& r) {
  st.bind(1, static_cast<int64_t>(r.time_ns));
  st.bind(2, static_cast<int64_t>(r.offset_ns));
  st.bind(3, static_cast<int64_t>(r.uncertainty_ns));
  st.bind(4, static_cast<int64_t>(r.rtt_ns));
  st.bind(5, r.probes);
  st.bind(6, r.phase);
}

void bind_row(SQLite::Statement& st, const StatementRow& r) {
  st.bind(1, r.statement);
  st.bind(2, r.script);
  st.bind(3, r.line);
  st.bind(4, r.sql);
}

void bind_row(SQLite::Statement& st, const StatementLatencyRow& r) {
  st.bind(1, static_cast<int64_t>(r.start_ns));
  st.bind(2, r.client_id);
  st.bind(3, static_cast<int64_t>(r.seq));
  st.bind(4, r.statement);
  st.bind(5, static_cast<int64_t>(r.latency_ns));
}

void bind_row(SQLite::Statement& st, const TcpSampleRow& r) {
  st.bind(1, static_cast<int64_t>(r.time_ns));
  st.bind(2, r.client_id);
  st.bind(3, r.connection);
  st.bind(4, static_cast<int64_t>(r.rtt_ns));
  st.bind(5, static_cast<int64_t>(r.rttvar_ns));
  st.bind(6, static_cast<int64_t>(r.total_retrans));
  st.bind(7, static_cast<int64_t>(r.unacked));
}

void bind_row(SQLite::Statement& st, const PoolerSampleRow& r) {
  int i = 1;
  st.bind(i++, static_cast<int64_t>(r.time_ns));
  st.bind(i++, r.database);
  for (const auto* v :
       {&r.interval_ns, &r.xacts, &r.queries, &r.wait_ns, &r.xact_ns, &r.query_ns, &r.cl_active,
        &r.cl_waiting, &r.sv_active, &r.sv_idle, &r.sv_used, &r.maxwait_ns}) {
    bind_opt(st, i++, *v);
  }
}

void bind_row(SQLite::Statement& st, const PgSettingRow& r) {
  st.bind(1, r.name);
  bind_opt(st, 2, r.setting);
  bind_opt(st, 3, r.unit);
  st.bind(4, static_cast<int64_t>(r.time_ns));
}

void bind_row(SQLite::Statement& st, const PgStatsSampleRow& r) {
  int i = 1;
  st.bind(i++, static_cast<int64_t>(r.time_ns));
  st.bind(i++, static_cast<int64_t>(r.duration_ns));
  for (const auto* v :
       {&r.xact_commit, &r.xact_rollback, &r.temp_files, &r.temp_bytes, &r.wal_records, &r.wal_fpi,
        &r.wal_bytes, &r.checkpoints_timed, &r.checkpoints_req}) {
    bind_opt(st, i++, *v);
  }
  st.bind(i++, static_cast<int64_t>(r.walsenders));
  bind_opt(st, i++, r.statements);
}

void bind_row(SQLite::Statement& st, const PgReplicationRow& r) {
  int i = 1;
  st.bind(i++, static_cast<int64_t>(r.time_ns));
  st.bind(i++, r.pid);
  for (const auto* v : {&r.application_name, &r.client_addr, &r.state, &r.sync_state}) {
    bind_opt(st, i++, *v);
  }
  for (const auto* v : {&r.sync_priority, &r.write_lag_ns, &r.flush_lag_ns, &r.replay_lag_ns,
                        &r.flush_behind_bytes, &r.reply_age_ns}) {
    bind_opt(st, i++, *v);
  }
}

void bind_row(SQLite::Statement& st, const PgStatementRow& r) {
  int i = 1;
  st.bind(i++, static_cast<int64_t>(r.time_ns));
  st.bind(i++, static_cast<int64_t>(r.query_id));
  st.bind(i++, static_cast<int64_t>(r.user_id));
  st.bind(i++, static_cast<int64_t>(r.db_id));
  st.bind(i++, r.toplevel ? 1 : 0);
  st.bind(i++, static_cast<int64_t>(r.calls));
  for (const auto* v :
       {&r.plans, &r.total_plan_time_ns, &r.total_exec_time_ns, &r.rows, &r.temp_blks_written,
        &r.wal_fpi, &r.wal_bytes, &r.jit_functions, &r.jit_generation_time_ns,
        &r.jit_inlining_time_ns, &r.jit_optimization_time_ns, &r.jit_emission_time_ns}) {
    bind_opt(st, i++, *v);
  }
}

// Inserts `rows` with `st`, one statement step each: no allocation per row.
template <typename Row>
void write_each(SQLite::Statement& st, const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    bind_row(st, r);
    run_row(st);
  }
}

// PostgreSQL statistics; inside write()'s transaction.
template <typename PgStats>
void write_pg_stats(const PgStatsRows& rows, PgStats& st) {
  write_each(st.setting, rows.settings);
  write_each(st.sample, rows.samples);
  write_each(st.replication, rows.replication);
  write_each(st.statement, rows.statements);
  for (const auto& r : rows.statements) {
    if (!r.query) continue;
    st.text.bind(1, static_cast<int64_t>(r.query_id));
    st.text.bind(2, *r.query);
    run_row(st.text);
  }
}
}  // namespace

void Store::write_rows(const Batch& b) {
  auto& s = *stmts_;
  try {
    write_each(s.sample, b.samples);
    write_each(s.host_sample, b.host_samples);
    write_each(s.process, b.processes);
    s.ticks.write_process_samples(b.process_samples);
    write_each(s.ash_tick, b.ash_ticks);
    write_each(s.pg_activity, b.pg_activity);
    write_each(s.pg_session, b.pg_sessions);
    write_each(s.pg_session_idle, b.pg_session_idles);
    write_each(s.record_client, b.record_clients);
    write_each(s.client, b.clients);
    // Query rows: write_queries(), in key order over all batches.
    write_each(s.query_error, b.query_errors);
    write_each(s.query_skipped, b.query_skips);
    write_each(s.query_sleep, b.query_sleeps);
    write_each(s.query_unfinished, b.query_unfinished);
    write_each(s.pgbench_aggregate, b.pgbench_aggregates);
    write_each(s.clock_offset, b.clock_offsets);
    write_each(s.statement, b.statements);
    write_each(s.statement_latency, b.statement_latencies);
    write_each(s.tcp_sample, b.tcp_samples);
    write_each(s.pooler_sample, b.pooler_samples);
    write_pg_stats(b.pg_stats, s.pg_stats);
    write_each(s.pg_lock_wait, b.pg_lock_waits);
    s.ticks.write_thread_samples(b.thread_samples);
    write_depth(b, s.depth);
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite, fmt::format("cannot write to {}: {}", path_, e.what()),
                e.getExtendedErrorCode());
  }
}

bool is_damaged(const Error& e) {
  const int primary = e.code() & 0xff;
  return (e.kind() == ErrorKind::sqlite || e.kind() == ErrorKind::usage) &&
         (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB);
}

std::optional<std::string> missing_schema_object(const Error& e) {
  if (e.kind() != ErrorKind::sqlite || (e.code() & 0xff) != SQLITE_ERROR) return std::nullopt;
  const std::string_view message = e.what();
  for (const std::string_view kind : {"table", "column"}) {
    const auto prefix = fmt::format("no such {}: ", kind);
    if (!message.starts_with(prefix)) continue;
    auto name = message.substr(prefix.size());
    if (name.starts_with("main.")) name.remove_prefix(5);
    return fmt::format("{} {}", kind, name);
  }
  return std::nullopt;
}

bool is_unwritable(const Error& e) {
  const int primary = e.code() & 0xff;
  return e.kind() == ErrorKind::sqlite &&
         (primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN || primary == SQLITE_PERM ||
          primary == SQLITE_FULL || primary == SQLITE_IOERR);
}

bool is_busy(const Error& e) {
  return e.kind() == ErrorKind::sqlite && (e.code() & 0xff) == SQLITE_BUSY;
}

bool is_duplicate_key(const Error& e) {
  return e.kind() == ErrorKind::sqlite &&
         (e.code() == SQLITE_CONSTRAINT_PRIMARYKEY || e.code() == SQLITE_CONSTRAINT_UNIQUE);
}

}  // namespace stallscope::schema
