#include "schema/tick_rows.h"

#include <fmt/format.h>

#include "common/units.h"
#include "schema/bind.h"

namespace stallscope::schema::detail {
namespace {

// What process_sample reads for a counter without a process_io_sample row: 0,
// or NULL at first sight (no span).
bool is_default(const std::optional<std::int64_t>& v, bool first_sight) {
  return first_sight ? !v.has_value() : v == 0;
}

}  // namespace

NameIds::NameIds(SQLite::Database& db, const std::string& table, const std::string& id_column,
                 const std::string& name_column)
    : db_(db),
      find_(db, fmt::format("SELECT {} FROM {} WHERE {} = ?", id_column, table, name_column)),
      insert_(db, fmt::format("INSERT INTO {} ({}) VALUES (?)", table, name_column)) {}

std::int64_t NameIds::id(const std::string& name) {
  if (auto it = ids_.find(name); it != ids_.end()) return it->second;
  std::int64_t id = 0;
  find_.bind(1, name);
  if (find_.executeStep()) {
    id = find_.getColumn(0).getInt64();
    find_.reset();
  } else {
    find_.reset();
    insert_.bind(1, name);
    run_row(insert_);
    id = db_.getLastInsertRowid();
  }
  if (ids_.size() >= kMaxRemembered) ids_.clear();
  ids_.emplace(name, id);
  return id;
}

TickRowWriter::TickRowWriter(SQLite::Database& db)
    : process_tick_(db,
                    "INSERT INTO process_tick (sample_id, process_id, state, cpu_ns, "
                    "run_delay_ns, utime_ticks, stime_ticks, wchan_id, rss_kib, "
                    "voluntary_ctxt_switches, nonvoluntary_ctxt_switches, span_ns, "
                    "blkio_delay_ns) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING"),
      forget_process_(db, "DELETE FROM process_tick WHERE sample_id = ?1 AND process_id = ?2"),
      forget_process_io_(db,
                         "DELETE FROM process_io_sample WHERE sample_id = ?1 AND process_id = ?2"),
      process_poll_(
          db,
          "INSERT OR REPLACE INTO process_poll (sample_id, process_id, tid, syscall, "
          "timed, peer_sockets, database_sockets, database_queued) VALUES (?,?,?,?,?,?,?,?)"),
      process_io_(db,
                  "INSERT OR REPLACE INTO process_io_sample (sample_id, process_id, majflt, "
                  "read_bytes, write_bytes, kernel_stack) VALUES (?,?,?,?,?,?)"),
      thread_tick_(db,
                   "INSERT OR REPLACE INTO thread_tick (sample_id, process_id, tid, "
                   "thread_comm_id, state, cpu_ns, run_delay_ns, wchan_id, kernel_stack, span_ns) "
                   "VALUES (?,?,?,?,?,?,?,?,?,?)"),
      interval_(db, "SELECT interval_ns FROM sample WHERE sample_id = ?"),
      wchans_(db, "wchan", "wchan_id", "name"),
      thread_comms_(db, "thread_comm", "thread_comm_id", "comm") {}

void TickRowWriter::forget() noexcept {
  wchans_.forget();
  thread_comms_.forget();
  interval_sample_id_ = -1;
  interval_ns_.reset();
}

std::optional<std::int64_t> TickRowWriter::stored_span(std::int64_t sample_id,
                                                       std::optional<std::int64_t> span) {
  if (!span) return span;
  if (sample_id != interval_sample_id_) {
    interval_.bind(1, static_cast<int64_t>(sample_id));
    interval_ns_.reset();
    if (interval_.executeStep() && !interval_.getColumn(0).isNull())
      interval_ns_ = interval_.getColumn(0).getInt64();
    interval_.reset();
    interval_sample_id_ = sample_id;
  }
  // A real span is never 0 (it runs between two distinct ticks), so 0 is
  // free to mean "this tick's interval".
  if (interval_ns_ && *span == *interval_ns_ && *span != 0) return 0;
  return span;
}

void TickRowWriter::write_process_samples(const std::vector<ProcessSampleRow>& rows) {
  for (const auto& r : rows) {
    auto& st = process_tick_;
    st.bind(1, static_cast<int64_t>(r.sample_id));
    st.bind(2, static_cast<int64_t>(r.process_id));
    st.bind(3, std::string(1, r.state));
    bind_opt(st, 4, r.cpu_ns);
    bind_opt(st, 5, r.run_delay_ns);
    bind_opt(st, 6, r.utime_ticks);
    bind_opt(st, 7, r.stime_ticks);
    if (r.wchan) {
      st.bind(8, static_cast<int64_t>(wchans_.id(*r.wchan)));
    } else {
      st.bind(8);
    }
    // Whole pages, so whole KiB: 1–2 bytes a row fewer than in bytes.
    bind_opt(st, 9,
             r.rss_bytes ? std::optional<std::int64_t>(*r.rss_bytes / common::kBytesPerKiB)
                         : std::nullopt);
    bind_opt(st, 10, r.voluntary_ctxt_switches);
    bind_opt(st, 11, r.nonvoluntary_ctxt_switches);
    bind_opt(st, 12, stored_span(r.sample_id, r.span_ns));
    bind_opt(st, 13, r.blkio_delay_ns);
    if (st.exec() == 0) {
      // The same (sample_id, process_id) again: the new row replaces the old
      // one and its process_io_sample row, as INSERT OR REPLACE would.
      for (auto* del : {&forget_process_, &forget_process_io_}) {
        del->bind(1, static_cast<int64_t>(r.sample_id));
        del->bind(2, static_cast<int64_t>(r.process_id));
        run_row(*del);
      }
      st.reset();
      st.exec();
    }
    st.reset();
    st.clearBindings();

    if (r.poll_wait) write_poll_wait(r.sample_id, r.process_id, 0, *r.poll_wait);

    const bool first_sight = !r.span_ns;
    if (is_default(r.majflt, first_sight) && is_default(r.read_bytes, first_sight) &&
        is_default(r.write_bytes, first_sight) && !r.kernel_stack) {
      continue;
    }
    auto& io = process_io_;
    io.bind(1, static_cast<int64_t>(r.sample_id));
    io.bind(2, static_cast<int64_t>(r.process_id));
    bind_opt(io, 3, r.majflt);
    bind_opt(io, 4, r.read_bytes);
    bind_opt(io, 5, r.write_bytes);
    bind_opt(io, 6, r.kernel_stack);
    run_row(io);
  }
}

void TickRowWriter::write_thread_samples(const std::vector<ThreadSampleRow>& rows) {
  for (const auto& r : rows) {
    auto& st = thread_tick_;
    st.bind(1, static_cast<int64_t>(r.sample_id));
    st.bind(2, static_cast<int64_t>(r.process_id));
    st.bind(3, r.tid);
    st.bind(4, static_cast<int64_t>(thread_comms_.id(r.comm)));
    st.bind(5, std::string(1, r.state));
    bind_opt(st, 6, r.cpu_ns);
    bind_opt(st, 7, r.run_delay_ns);
    if (r.wchan) {
      st.bind(8, static_cast<int64_t>(wchans_.id(*r.wchan)));
    } else {
      st.bind(8);
    }
    bind_opt(st, 9, r.kernel_stack);
    bind_opt(st, 10, stored_span(r.sample_id, r.span_ns));
    run_row(st);
    if (r.poll_wait) write_poll_wait(r.sample_id, r.process_id, r.tid, *r.poll_wait);
  }
}

void TickRowWriter::write_poll_wait(std::int64_t sample_id, std::int64_t process_id, int tid,
                                    const PollWaitRow& w) {
  auto& pw = process_poll_;
  const auto count = [](std::optional<int> v) {
    return v ? std::optional<std::int64_t>(*v) : std::nullopt;
  };
  pw.bind(1, static_cast<int64_t>(sample_id));
  pw.bind(2, static_cast<int64_t>(process_id));
  pw.bind(3, tid);
  pw.bind(4, w.syscall);
  pw.bind(5, w.timed ? 1 : 0);
  bind_opt(pw, 6, count(w.peer_sockets));
  bind_opt(pw, 7, count(w.database_sockets));
  bind_opt(pw, 8, count(w.database_queued));
  run_row(pw);
}

}  // namespace stallscope::schema::detail
