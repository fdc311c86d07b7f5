// The reads behind per-query attribution: client → backend pid, and the
// queries' send intervals.
#include "schema/attribution_readers.h"

namespace stallscope::schema {
namespace {

// start, sent (-R: + lag), answered, and (client_id, connection) packed as
// client_id · 2^24 + connection (kQuerySendNoConnection: NULL).
constexpr const char* kQuerySendSql =
    "SELECT start_ns, start_ns + max(coalesce(lag_ns, 0), 0), start_ns + latency_ns, "
    "(client_id << 24) + coalesce(connection, 16777215) "
    "FROM query WHERE start_ns <= ?1 ORDER BY start_ns";
// The same with the transactions cut short at the run's end, busy until the
// driver gave up on them: SQLite merges the two ordered scans (no sort of
// `query`).
constexpr const char* kQuerySendWithUnfinishedSql =
    "SELECT start_ns, start_ns + max(coalesce(lag_ns, 0), 0), start_ns + latency_ns, "
    "(client_id << 24) + coalesce(connection, 16777215) "
    "FROM query WHERE start_ns <= ?1 UNION ALL "
    "SELECT start_ns, start_ns + max(coalesce(lag_ns, 0), 0), start_ns + elapsed_ns, "
    "(client_id << 24) + coalesce(connection, 16777215) "
    "FROM query_unfinished WHERE start_ns <= ?1 ORDER BY 1";
static_assert(kQuerySendNoConnection == 16777215);

const char* query_send_sql(SQLite::Database& db) {
  return db.tableExists("query_unfinished") ? kQuerySendWithUnfinishedSql : kQuerySendSql;
}

}  // namespace

ClientBackendScan::ClientBackendScan(Store& store)
    : cursor_(store.db(),
              "SELECT client_id, connection, backend_pid FROM client "
              "WHERE backend_pid IS NOT NULL") {}

bool ClientBackendScan::next(ClientBackend& row) {
  if (!cursor_.step()) return false;
  row.client_id = cursor_.int64(0);
  row.connection = cursor_.int64(1);
  row.backend_pid = static_cast<int>(cursor_.int64(2));
  return true;
}

bool queries_name_connections(Store& store) {
  Cursor st(store.db(), "SELECT EXISTS (SELECT 1 FROM query WHERE connection IS NOT NULL)");
  return st.step() && st.int64(0) != 0;
}

QuerySendScan::QuerySendScan(std::unique_ptr<SQLite::Database> own, SQLite::Database& db,
                             std::int64_t until_ns)
    : own_(std::move(own)), cursor_(db, query_send_sql(db)) {
  cursor_.bind(1, until_ns);
}

QuerySendScan::QuerySendScan(Store& store, std::int64_t until_ns)
    : QuerySendScan(nullptr, store.db(), until_ns) {}

QuerySendScan QuerySendScan::open(const std::string& path, std::int64_t until_ns) {
  auto db = Store::open_readonly_database(path);
  auto& ref = *db;
  return QuerySendScan(std::move(db), ref, until_ns);
}

bool QuerySendScan::next(QuerySend& row) {
  if (!cursor_.step()) return false;
  row = {cursor_.int64(0), cursor_.int64(1), cursor_.int64(2), cursor_.int64(3)};
  return true;
}

namespace {
constexpr std::size_t kBatchRows = 16384;
constexpr std::size_t kMaxBatches = 8;
}  // namespace

QuerySendBatches::QuerySendBatches(std::string path, std::int64_t until_ns)
    : reader_(&QuerySendBatches::read, this, std::move(path), until_ns) {}

QuerySendBatches::~QuerySendBatches() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reader_.join();
}

void QuerySendBatches::read(std::string path, std::int64_t until_ns) {
  try {
    auto scan = QuerySendScan::open(path, until_ns);
    std::vector<QuerySend> batch;
    batch.reserve(kBatchRows);
    bool more = true;
    while (more) {
      QuerySend row;
      more = scan.next(row);
      if (more) batch.push_back(row);
      if (batch.size() == kBatchRows || (!more && !batch.empty())) {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || batches_.size() < kMaxBatches; });
        if (stop_) return;
        batches_.push_back(std::move(batch));
        batch = {};
        batch.reserve(kBatchRows);
        cv_.notify_all();
      }
    }
  } catch (...) {
    std::lock_guard lock(mu_);
    reader_error_ = std::current_exception();
  }
  std::lock_guard lock(mu_);
  reader_done_ = true;
  cv_.notify_all();
}

bool QuerySendBatches::next(QuerySend& row) {
  if (batch_pos_ == batch_.size()) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !batches_.empty() || reader_done_; });
    if (batches_.empty()) {
      if (reader_error_) std::rethrow_exception(reader_error_);
      return false;
    }
    batch_ = std::move(batches_.front());
    batches_.pop_front();
    batch_pos_ = 0;
    cv_.notify_all();
  }
  row = batch_[batch_pos_++];
  return true;
}

}  // namespace stallscope::schema
