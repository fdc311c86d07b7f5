#include "schema/process_scan.h"

namespace stallscope::schema {
namespace {

// process_tick's columns, by the scan's column index (5 and 6 are decoded).
constexpr const char* kMainSql =
    "SELECT sample_id, process_id, state, cpu_ns, run_delay_ns, span_ns, wchan_id, utime_ticks, "
    "stime_ticks FROM process_tick WHERE sample_id >= ?1 ORDER BY sample_id, process_id";
constexpr int kSpan = 5, kWchan = 6, kWriteBytes = 9, kMajflt = 10;
// wchan ids are 1, 2, ... in first-seen order; larger ones (not written by
// stallscope) are looked up one by one.
constexpr std::int64_t kMaxDenseWchanId = 1 << 20;

}  // namespace

ProcessSampleScan::ProcessSampleScan(SQLite::Database& db, std::int64_t from_sample_id)
    : main_(db, kMainSql),
      io_(db,
          "SELECT sample_id, process_id, write_bytes, majflt FROM process_io_sample "
          "WHERE sample_id >= ?1 ORDER BY sample_id, process_id"),
      sample_(db,
              "SELECT sample_id, interval_ns FROM sample WHERE sample_id >= ?1 ORDER BY sample_id"),
      by_id_(db, "SELECT name FROM wchan WHERE wchan_id = ?1") {
  main_.bind(1, from_sample_id);
  io_.bind(1, from_sample_id);
  sample_.bind(1, from_sample_id);
  Cursor names(db, "SELECT wchan_id, name FROM wchan WHERE wchan_id >= 0 AND wchan_id < ?1");
  names.bind(1, kMaxDenseWchanId);
  while (names.step()) {
    const auto id = static_cast<std::size_t>(names.int64(0));
    if (id >= wchan_names_.size()) wchan_names_.resize(id + 1);
    wchan_names_[id] = std::string(names.text(1));
  }
  next_io();
  next_sample();
}

void ProcessSampleScan::next_io() {
  io_row_ = io_.step();
  if (io_row_) io_key_ = {io_.int64(0), io_.int64(1)};
}

void ProcessSampleScan::next_sample() {
  sample_row_ = sample_.step();
  if (sample_row_) {
    sample_id_at_ = sample_.int64(0);
    interval_ns_at_ = sample_.opt_int64(1);
  }
}

bool ProcessSampleScan::step() {
  if (!main_.step()) return false;
  key_ = {main_.int64(0), main_.int64(1)};

  // process_io_sample: its rows are a subset of process_tick's keys.
  while (io_row_ && io_key_ < key_) next_io();
  const auto stored_span = main_.opt_int64(kSpan);
  if (io_row_ && io_key_ == key_) {
    write_bytes_ = io_.opt_int64(2);
    majflt_ = io_.opt_int64(3);
  } else if (stored_span) {
    write_bytes_ = 0;
    majflt_ = 0;
  } else {
    write_bytes_.reset();
    majflt_.reset();
  }

  // span_ns 0 stands for the tick's interval_ns.
  span_ns_ = stored_span;
  if (stored_span == 0) {
    while (sample_row_ && sample_id_at_ < key_.first) next_sample();
    span_ns_.reset();
    if (sample_row_ && sample_id_at_ == key_.first) span_ns_ = interval_ns_at_;
  }

  wchan_.reset();
  if (const auto id = main_.opt_int64(kWchan)) {
    if (*id >= 0 && *id < static_cast<std::int64_t>(wchan_names_.size())) {
      if (const auto& name = wchan_names_[static_cast<std::size_t>(*id)]) wchan_ = *name;
    } else {
      by_id_.reset();
      by_id_.bind(1, *id);
      if (by_id_.step()) {
        sparse_name_ = std::string(by_id_.text(0));
        wchan_ = sparse_name_;
      }
    }
  }
  return true;
}

bool ProcessSampleScan::is_null(int column) const {
  switch (column) {
    case kSpan:
      return !span_ns_;
    case kWchan:
      return !wchan_;
    case kWriteBytes:
      return !write_bytes_;
    case kMajflt:
      return !majflt_;
    default:
      return main_.is_null(column);
  }
}

std::int64_t ProcessSampleScan::int64(int column) const {
  switch (column) {
    case 0:
      return key_.first;
    case 1:
      return key_.second;
    default:
      return opt_int64(column).value_or(0);
  }
}

std::optional<std::int64_t> ProcessSampleScan::opt_int64(int column) const {
  switch (column) {
    case kSpan:
      return span_ns_;
    case kWchan:
      return std::nullopt;  // text
    case kWriteBytes:
      return write_bytes_;
    case kMajflt:
      return majflt_;
    default:
      return main_.opt_int64(column);
  }
}

std::string_view ProcessSampleScan::text(int column) const {
  if (column == kWchan) return wchan_.value_or(std::string_view{});
  if (column == kSpan || column == kWriteBytes || column == kMajflt) return {};
  return main_.text(column);
}

}  // namespace stallscope::schema
