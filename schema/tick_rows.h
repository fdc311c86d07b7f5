// Private to schema/: the stored form of process_sample and thread_sample
// rows (schema/v1.sql). Producers hand the writer whole rows
// (ProcessSampleRow, ThreadSampleRow, names as text); TickRowWriter writes
// them compactly:
//   - wchan names and thread names are stored once, in wchan / thread_comm,
//     and referenced by id (process_tick.wchan_id, thread_tick.wchan_id,
//     thread_tick.thread_comm_id);
//   - majflt, read_bytes, write_bytes and kernel_stack of a process row go to
//     process_io_sample, and only when one of them is not the default (0, or
//     NULL at first sight; kernel_stack NULL);
//   - span_ns equal to the tick's sample.interval_ns is stored as 0;
//   - rss_bytes is stored in KiB (a whole number of pages is a whole number
//     of KiB).
// The views process_sample and thread_sample decode them all;
// schema/process_scan.h reads process_sample rows without the view, for speed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>

#include "schema/records.h"

namespace stallscope::schema::detail {

// Name → id of a lookup table (wchan, thread_comm), remembered in memory.
// A name not remembered is looked up in the table, and inserted when absent,
// inside the caller's transaction. At most kMaxRemembered names are kept (the
// table stays the authority), so memory is bounded whatever the names.
class NameIds {
 public:
  // `table` (id INTEGER PRIMARY KEY, name TEXT UNIQUE) with those columns.
  NameIds(SQLite::Database& db, const std::string& table, const std::string& id_column,
          const std::string& name_column);
  std::int64_t id(const std::string& name);
  // Drops what is remembered: after a rolled-back transaction the ids it
  // inserted do not exist.
  void forget() noexcept { ids_.clear(); }

  static constexpr std::size_t kMaxRemembered = 4096;

 private:
  SQLite::Database& db_;
  SQLite::Statement find_, insert_;
  std::unordered_map<std::string, std::int64_t> ids_;
};

// Writes Batch::process_samples and Batch::thread_samples into process_tick,
// process_io_sample, thread_tick (and new names into wchan / thread_comm),
// inside the caller's transaction. Rows whose tick (sample row) is not in the
// file keep span_ns as given.
class TickRowWriter {
 public:
  explicit TickRowWriter(SQLite::Database& db);
  void write_process_samples(const std::vector<ProcessSampleRow>& rows);
  void write_thread_samples(const std::vector<ThreadSampleRow>& rows);
  // After a failed (rolled-back) transaction.
  void forget() noexcept;

 private:
  // span_ns as stored: 0 when it equals the tick's interval_ns.
  std::optional<std::int64_t> stored_span(std::int64_t sample_id, std::optional<std::int64_t> span);
  // One process_poll row: tid 0 for a process row, else the thread row's.
  void write_poll_wait(std::int64_t sample_id, std::int64_t process_id, int tid,
                       const PollWaitRow& w);

  SQLite::Statement process_tick_, forget_process_, forget_process_io_, process_poll_, process_io_,
      thread_tick_, interval_;
  NameIds wchans_, thread_comms_;
  std::int64_t interval_sample_id_ = -1;  // one-tick cache of interval_
  std::optional<std::int64_t> interval_ns_;
};

}  // namespace stallscope::schema::detail
