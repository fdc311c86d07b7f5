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
using detail::with_system_error;
namespace {

int read_user_version(SQLite::Database& db) {
  return db.execAndGet("PRAGMA user_version").getInt();
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

std::string detail::with_system_error(SQLite::Database& db, const std::string& message) {
  const int err = sqlite3_system_errno(db.getHandle());
  if (err == 0) return message;
  return fmt::format("{} ({})", message, std::strerror(err));
}

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

}  // namespace

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
    store.prepare_statements();
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
                         "server_version, command, delayacct_set, kernel_stacks, rate_tps, "
                         "machine_id, boot_id) "
                         "VALUES (1,?,'running',?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
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
    bind_opt(st, i++, r.rate_tps);
    bind_opt(st, i++, r.machine_id);
    bind_opt(st, i++, r.boot_id);
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
