// A streaming scan of process_sample for explain: the view's rows in primary
// key order, (sample_id, process_id), from a sample_id on, read from the
// stored tables (schema/v1.sql process_tick, process_io_sample, wchan) without
// the view's per-row lookups — wchan names come from memory, and
// process_io_sample and sample are read in step with process_tick.
//
// The columns, 0-based, are those of
//   SELECT sample_id, process_id, state, cpu_ns, run_delay_ns, span_ns, wchan,
//          utime_ticks, stime_ticks, write_bytes, majflt
//   FROM process_sample WHERE sample_id >= ?1 ORDER BY sample_id, process_id
// with the view's values (span_ns in ns; write_bytes and majflt 0 without a
// process_io_sample row, NULL at first sight).
//
//   schema::ProcessSampleScan st(db, first_sample_id);
//   while (st.step()) use(st.int64(0), st.text(2), st.opt_int64(5));
//
// Errors (a file without these tables, a failed step) throw schema::SqliteError,
// like Cursor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <SQLiteCpp/Database.h>

#include "schema/row.h"

namespace stallscope::schema {

class ProcessSampleScan {
 public:
  ProcessSampleScan(SQLite::Database& db, std::int64_t from_sample_id);

  // Next row; false when done.
  bool step();
  bool is_null(int column) const;
  std::int64_t int64(int column) const;  // 0 for NULL
  std::optional<std::int64_t> opt_int64(int column) const;
  // state or wchan; valid until the next step; empty for NULL.
  std::string_view text(int column) const;

 private:
  Cursor main_;    // process_tick
  Cursor io_;      // process_io_sample, in step
  Cursor sample_;  // sample (interval_ns), in step
  Cursor by_id_;   // wchan name of an id beyond wchan_names_
  void next_io();
  void next_sample();
  bool io_row_ = false, sample_row_ = false;  // the cursor is on a row
  // (sample_id, process_id) of this row and of io_'s row; sample_'s sample_id.
  std::pair<std::int64_t, std::int64_t> key_, io_key_;
  std::int64_t sample_id_at_ = 0;
  std::optional<std::int64_t> interval_ns_at_;           // sample_'s interval_ns
  std::vector<std::optional<std::string>> wchan_names_;  // by wchan_id
  // This row's decoded columns (the others are main_'s).
  std::optional<std::int64_t> span_ns_, write_bytes_, majflt_;
  std::optional<std::string_view> wchan_;
  std::string sparse_name_;  // by_id_'s last name
};

}  // namespace stallscope::schema
