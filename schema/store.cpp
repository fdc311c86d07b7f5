#include "schema/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <fmt/format.h>

#include "common/error.h"
#include "schema/schema_sql.h"

namespace stallscope::schema {
namespace {

template <typename T>
void bind_opt(SQLite::Statement& st, int index, const std::optional<T>& v) {
  if (v) {
    if constexpr (std::is_same_v<T, int>) {
      st.bind(index, *v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      st.bind(index, *v);
    } else {
      st.bind(index, static_cast<int64_t>(*v));
    }
  } else {
    st.bind(index);
  }
}

void run_row(SQLite::Statement& st) {
  st.exec();
  st.reset();
  st.clearBindings();
}

int read_user_version(SQLite::Database& db) {
  return db.execAndGet("PRAGMA user_version").getInt();
}

void check_run_file(SQLite::Database& db, const std::string& path) {
  int version = 0;
  bool has_run = false;
  try {
    version = read_user_version(db);
    has_run = db.tableExists("run");
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot read {}: not a stallscope run file ({})", path, e.what()));
  }
  if (version > kSchemaVersion) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot read {}: schema version {} is newer than this stallscope "
                            "understands ({}); upgrade stallscope",
                            path, version, kSchemaVersion));
  }
  if (version < 1 || !has_run) {
    throw Error(ErrorKind::usage, fmt::format("cannot read {}: not a stallscope run file", path));
  }
}

std::unique_ptr<SQLite::Database> open_existing(const std::string& path, int flags) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw Error(ErrorKind::usage, fmt::format("cannot open {}: no such file", path), ENOENT);
  }
  try {
    auto db = std::make_unique<SQLite::Database>(path, flags, 5000);
    check_run_file(*db, path);
    return db;
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::usage, fmt::format("cannot open {}: {}", path, e.what()),
                e.getExtendedErrorCode());
  }
}

}  // namespace

struct Store::Statements {
  explicit Statements(SQLite::Database& db)
      : sample(db, "INSERT INTO sample VALUES (?,?,?,?,?,?)"),
        host_sample(db, "INSERT INTO host_sample VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        process(db,
                "INSERT INTO process VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (process_id) DO UPDATE "
                "SET ppid = excluded.ppid, comm = excluded.comm, cmdline = excluded.cmdline"),
        process_sample(db,
                       "INSERT OR REPLACE INTO process_sample VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        ash_tick(db, "INSERT INTO ash_tick VALUES (?,?,?)"),
        pg_activity(db, "INSERT INTO pg_activity_sample VALUES (?,?,?,?,?,?,?,?)"),
        client(db, "INSERT OR REPLACE INTO client VALUES (?,?,?,?,?,?)"),
        query(db, "INSERT INTO query VALUES (?,?,?,?,?,?,?)") {}
  SQLite::Statement sample, host_sample, process, process_sample, ash_tick, pg_activity, client,
      query;
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
  if (!memory) {
    // Create the file ourselves, exclusively and mode 0600, so it never
    // exists with looser permissions and an existing run is never clobbered.
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      int err = errno;
      throw Error(
          ErrorKind::usage,
          fmt::format("cannot create {}: {}", path,
                      err == EEXIST ? "file exists (choose another -o)" : std::strerror(err)),
          err);
    }
    ::close(fd);
  }
  try {
    auto db = std::make_unique<SQLite::Database>(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE,
                                                 5000);
    // SQLite gives the -wal and -shm files the database file's mode (0600).
    if (!memory) db->exec("PRAGMA journal_mode=WAL");
    db->exec("PRAGMA synchronous=NORMAL");
    {
      SQLite::Transaction tx(*db);
      db->exec(kSchemaV1Sql);
      db->exec(fmt::format("PRAGMA user_version = {}", kSchemaVersion));
      tx.commit();
    }
    Store store(std::move(db), path);
    store.stmts_ = std::make_unique<Statements>(*store.db_);
    return store;
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite, fmt::format("cannot create {}: {}", path, e.what()),
                e.getExtendedErrorCode());
  }
}

Store Store::open_readonly(const std::string& path) {
  return Store(open_existing(path, SQLite::OPEN_READONLY), path);
}

Store Store::open_readwrite(const std::string& path) {
  Store store(open_existing(path, SQLite::OPEN_READWRITE), path);
  return store;
}

void Store::begin_run(const RunInfo& r) {
  try {
    SQLite::Statement st(
        *db_,
        "INSERT INTO run (run_id, mode, status, host, kernel, cores, "
        "clock_ticks_per_s, start_ns, command_line, conninfo, tool_version, hz, "
        "stallscope_pid, stallscope_start_ticks, clients, threads, protocol, sql, "
        "server_version, command) VALUES (1,?,'running',?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
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
    st.exec();
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite, fmt::format("cannot write run row to {}: {}", path_, e.what()),
                e.getExtendedErrorCode());
  }
}

void Store::end_run(std::int64_t end_ns, const std::string& status, const std::string& end_reason,
                    std::optional<int> command_exit_status) {
  try {
    SQLite::Statement st(
        *db_, "UPDATE run SET end_ns = ?, status = ?, end_reason = ?, command_exit_status = ?");
    st.bind(1, static_cast<int64_t>(end_ns));
    st.bind(2, status);
    st.bind(3, end_reason);
    bind_opt(st, 4, command_exit_status);
    st.exec();
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite, fmt::format("cannot finish run in {}: {}", path_, e.what()),
                e.getExtendedErrorCode());
  }
}

void Store::write(const Batch& b) {
  if (!stmts_) stmts_ = std::make_unique<Statements>(*db_);
  auto& s = *stmts_;
  try {
    SQLite::Transaction tx(*db_);
    for (const auto& r : b.samples) {
      s.sample.bind(1, static_cast<int64_t>(r.sample_id));
      s.sample.bind(2, static_cast<int64_t>(r.time_ns));
      s.sample.bind(3, static_cast<int64_t>(r.mono_ns));
      bind_opt(s.sample, 4, r.interval_ns);
      s.sample.bind(5, static_cast<int64_t>(r.sampler_cpu_ns));
      s.sample.bind(6, static_cast<int64_t>(r.sampler_duration_ns));
      run_row(s.sample);
    }
    for (const auto& r : b.host_samples) {
      auto& st = s.host_sample;
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
      run_row(st);
    }
    for (const auto& r : b.processes) {
      auto& st = s.process;
      st.bind(1, static_cast<int64_t>(r.process_id));
      st.bind(2, r.pid);
      st.bind(3, static_cast<int64_t>(r.start_ticks));
      bind_opt(st, 4, r.start_ns);
      bind_opt(st, 5, r.ppid);
      st.bind(6, r.comm);
      bind_opt(st, 7, r.cmdline);
      st.bind(8, static_cast<int64_t>(r.first_sample_id));
      run_row(st);
    }
    for (const auto& r : b.process_samples) {
      auto& st = s.process_sample;
      st.bind(1, static_cast<int64_t>(r.sample_id));
      st.bind(2, static_cast<int64_t>(r.process_id));
      st.bind(3, std::string(1, r.state));
      bind_opt(st, 4, r.cpu_ns);
      bind_opt(st, 5, r.run_delay_ns);
      bind_opt(st, 6, r.utime_ticks);
      bind_opt(st, 7, r.stime_ticks);
      bind_opt(st, 8, r.wchan);
      bind_opt(st, 9, r.rss_bytes);
      bind_opt(st, 10, r.majflt);
      bind_opt(st, 11, r.voluntary_ctxt_switches);
      bind_opt(st, 12, r.nonvoluntary_ctxt_switches);
      bind_opt(st, 13, r.span_ns);
      run_row(st);
    }
    for (const auto& r : b.ash_ticks) {
      s.ash_tick.bind(1, static_cast<int64_t>(r.ash_tick));
      s.ash_tick.bind(2, static_cast<int64_t>(r.time_ns));
      s.ash_tick.bind(3, static_cast<int64_t>(r.duration_ns));
      run_row(s.ash_tick);
    }
    for (const auto& r : b.pg_activity) {
      auto& st = s.pg_activity;
      st.bind(1, static_cast<int64_t>(r.time_ns));
      st.bind(2, static_cast<int64_t>(r.ash_tick));
      st.bind(3, r.pid);
      bind_opt(st, 4, r.backend_type);
      bind_opt(st, 5, r.state);
      bind_opt(st, 6, r.wait_event_type);
      bind_opt(st, 7, r.wait_event);
      bind_opt(st, 8, r.application_name);
      run_row(st);
    }
    for (const auto& r : b.clients) {
      auto& st = s.client;
      st.bind(1, r.client_id);
      st.bind(2, r.thread);
      bind_opt(st, 3, r.backend_pid);
      bind_opt(st, 4, r.connect_ns);
      bind_opt(st, 5, r.connect_latency_ns);
      bind_opt(st, 6, r.application_name);
      run_row(st);
    }
    for (const auto& r : b.queries) {
      auto& st = s.query;
      st.bind(1, r.client_id);
      st.bind(2, static_cast<int64_t>(r.seq));
      st.bind(3, static_cast<int64_t>(r.start_ns));
      st.bind(4, static_cast<int64_t>(r.latency_ns));
      bind_opt(st, 5, r.sqlstate);
      bind_opt(st, 6, r.rows);
      bind_opt(st, 7, r.error);
      run_row(st);
    }
    tx.commit();
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite, fmt::format("cannot write to {}: {}", path_, e.what()),
                e.getExtendedErrorCode());
  }
}

}  // namespace stallscope::schema
