// Typed reads of the run file behind per-query attribution
// (correlate/attribution.h): which backend served each driver connection,
// and a forward scan of the queries' send intervals.
//
//   schema::ClientBackendScan clients(store);
//   for (schema::ClientBackend c; clients.next(c);) map(c.client_id, c.connection, c.backend_pid);
//   schema::QuerySendScan sends(store, until_ns);
//   for (schema::QuerySend q; sends.next(q);) feed(q);
//
// Errors (a failed step) throw schema::SqliteError (store.h), like schema::Cursor.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <SQLiteCpp/Database.h>

#include "schema/row.h"
#include "schema/store.h"

namespace stallscope::schema {

// One client row with a backend pid.
struct ClientBackend {
  std::int64_t client_id = 0;
  std::int64_t connection = 0;  // 0 for NULL
  int backend_pid = 0;
};
// The client rows whose backend_pid is not NULL, in table order.
class ClientBackendScan {
 public:
  explicit ClientBackendScan(Store& store);
  // The next row into `row`; false when done.
  bool next(ClientBackend& row);

 private:
  Cursor cursor_;
};

// Whether any query row names its connection (query.connection not NULL).
bool queries_name_connections(Store& store);

// QuerySend::key's connection part for a query whose connection is NULL.
inline constexpr std::int64_t kQuerySendNoConnection = (std::int64_t{1} << 24) - 1;

// One query as the attribution sweep needs it: few columns, since the scan's
// cost is mostly per column read.
struct QuerySend {
  std::int64_t start_ns = 0;
  std::int64_t sent_ns = 0;      // start_ns + max(lag_ns, 0) (-R: after its schedule lag)
  std::int64_t answered_ns = 0;  // start_ns + latency_ns
  // client_id · 2^24 + connection (kQuerySendNoConnection when NULL).
  std::int64_t key = 0;
};

// The queries with start_ns ≤ until_ns, in start_ns order (the table's
// clustering order), and among them the transactions cut short at the run's
// end (query_unfinished; answered_ns is when the driver gave up on them): a
// forward scan that holds no rows.
class QuerySendScan {
 public:
  // On the store's connection (the scan's thread must be the store's).
  QuerySendScan(Store& store, std::int64_t until_ns);
  // On a read-only connection of its own to the run file at `path`, for a
  // reader thread beside the store's. Throws schema::SqliteError when the file
  // cannot be opened.
  static QuerySendScan open(const std::string& path, std::int64_t until_ns);

  // The next row into `row`; false when done.
  bool next(QuerySend& row);

 private:
  QuerySendScan(std::unique_ptr<SQLite::Database> own, SQLite::Database& db, std::int64_t until_ns);
  std::unique_ptr<SQLite::Database> own_;  // open()'s connection; declared before cursor_
  Cursor cursor_;
};

// The same rows read on a thread of its own, through a read-only connection
// of its own on the file at `path` (QuerySendScan::open), and handed over in
// bounded batches (at most 8 × 16,384 rows queued): the scan runs beside the
// caller's work on another core. next() rethrows what the scan threw
// (schema::SqliteError); the destructor stops and joins the thread.
class QuerySendBatches {
 public:
  QuerySendBatches(std::string path, std::int64_t until_ns);
  ~QuerySendBatches();
  QuerySendBatches(const QuerySendBatches&) = delete;
  QuerySendBatches& operator=(const QuerySendBatches&) = delete;
  // The next row into `row`; false when done.
  bool next(QuerySend& row);

 private:
  void read(std::string path, std::int64_t until_ns);  // the reader thread

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<QuerySend>> batches_;
  bool reader_done_ = false, stop_ = false;
  std::exception_ptr reader_error_;
  std::vector<QuerySend> batch_;  // the batch being handed out
  std::size_t batch_pos_ = 0;
  std::thread reader_;  // last: started once the members above exist
};

}  // namespace stallscope::schema
