// The stored form of process_sample / thread_sample (schema/tick_rows.h) and
// explain's scan of it (schema/process_scan.h): every value written comes
// back unchanged through the views and the scan, while names are stored once
// and the rarely non-zero columns only when they are not 0.
#include <optional>
#include <string>
#include <vector>

#include <SQLiteCpp/Statement.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "schema/process_scan.h"
#include "schema/store.h"

namespace stallscope::schema {
namespace {

constexpr std::int64_t kTickNs = 100'000'000;

SampleRow tick(std::int64_t id) {
  SampleRow s{.sample_id = id, .time_ns = 1'000'000'000 * id, .mono_ns = kTickNs * id};
  if (id > 1) s.interval_ns = kTickNs;
  return s;
}

// A process_sample row as the sampler makes it after first sight.
ProcessSampleRow quiet_row(std::int64_t sample_id, std::int64_t process_id) {
  return ProcessSampleRow{.sample_id = sample_id,
                          .process_id = process_id,
                          .state = 'S',
                          .cpu_ns = 120'000,
                          .run_delay_ns = 3'000,
                          .utime_ticks = 0,
                          .stime_ticks = 0,
                          .wchan = "poll_schedule_timeout",
                          .rss_bytes = 5'242'880,
                          .majflt = 0,
                          .voluntary_ctxt_switches = 1,
                          .nonvoluntary_ctxt_switches = 0,
                          .span_ns = kTickNs,
                          .read_bytes = 0,
                          .write_bytes = 0};
}

// Every column of the view for one row, as text ("NULL" for NULL).
std::vector<std::string> view_row(SQLite::Database& db, std::int64_t sample_id,
                                  std::int64_t process_id) {
  SQLite::Statement q(db,
                      "SELECT state, cpu_ns, run_delay_ns, utime_ticks, stime_ticks, wchan, "
                      "rss_bytes, majflt, voluntary_ctxt_switches, nonvoluntary_ctxt_switches, "
                      "span_ns, read_bytes, write_bytes, blkio_delay_ns, kernel_stack "
                      "FROM process_sample WHERE sample_id = ? AND process_id = ?");
  q.bind(1, static_cast<int64_t>(sample_id));
  q.bind(2, static_cast<int64_t>(process_id));
  std::vector<std::string> out;
  if (!q.executeStep()) return out;
  for (int i = 0; i < q.getColumnCount(); ++i) {
    out.push_back(q.getColumn(i).isNull() ? "NULL" : q.getColumn(i).getString());
  }
  return out;
}

std::vector<std::string> expected(const ProcessSampleRow& r) {
  auto s = [](const auto& v) -> std::string {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::optional<std::string>>) {
      return v ? *v : "NULL";
    } else {
      return v ? std::to_string(*v) : "NULL";
    }
  };
  return {std::string(1, r.state),
          s(r.cpu_ns),
          s(r.run_delay_ns),
          s(r.utime_ticks),
          s(r.stime_ticks),
          s(r.wchan),
          s(r.rss_bytes),
          s(r.majflt),
          s(r.voluntary_ctxt_switches),
          s(r.nonvoluntary_ctxt_switches),
          s(r.span_ns),
          s(r.read_bytes),
          s(r.write_bytes),
          s(r.blkio_delay_ns),
          s(r.kernel_stack)};
}

std::int64_t count(SQLite::Database& db, const std::string& sql) {
  return db.execAndGet(sql).getInt64();
}

TEST(TickRows, EveryProcessSampleValueRoundTripsThroughTheView) {
  auto store = Store::create(":memory:");
  Batch b;
  for (int i = 1; i <= 3; ++i) b.samples.push_back(tick(i));
  std::vector<ProcessSampleRow> rows;
  // First sight: deltas NULL, no span.
  rows.push_back(
      {.sample_id = 1, .process_id = 1, .state = 'S', .wchan = "do_epoll_wait", .rss_bytes = 8192});
  // A quiet row one tick after its previous one (span = the tick's interval).
  rows.push_back(quiet_row(2, 1));
  // A writer in D with a stack, delay accounting on, a 10 s heartbeat span.
  auto d = quiet_row(3, 1);
  d.state = 'D';
  d.wchan = "folio_wait_bit_common";
  d.write_bytes = 4096 * 25;
  d.majflt = 2;
  d.blkio_delay_ns = 30'000'000;
  d.kernel_stack = "folio_wait_bit_common\nfilemap_fdatawait_range";
  d.span_ns = 10'000'000'000;
  rows.push_back(d);
  // /proc/PID/io unreadable: NULL bytes after first sight stay NULL.
  auto no_io = quiet_row(3, 2);
  no_io.read_bytes.reset();
  no_io.write_bytes.reset();
  rows.push_back(no_io);
  // Running: no wchan.
  auto running = quiet_row(3, 3);
  running.state = 'R';
  running.wchan.reset();
  rows.push_back(running);
  b.process_samples = rows;
  store.write(b);

  auto& db = store.db();
  for (const auto& r : rows) {
    EXPECT_EQ(view_row(db, r.sample_id, r.process_id), expected(r))
        << "sample " << r.sample_id << " process " << r.process_id;
  }
  // Stored: each name once, by id; span 0 for "one tick"; rss in KiB.
  EXPECT_EQ(count(db, "SELECT count(*) FROM wchan"), 3);
  EXPECT_EQ(count(db,
                  "SELECT count(*) FROM process_tick t JOIN wchan w USING (wchan_id) "
                  "WHERE w.name = 'poll_schedule_timeout'"),
            2);
  EXPECT_EQ(count(db, "SELECT span_ns FROM process_tick WHERE sample_id = 2"), 0);
  EXPECT_EQ(count(db, "SELECT span_ns FROM process_tick WHERE sample_id = 3 AND process_id = 1"),
            10'000'000'000);
  EXPECT_EQ(count(db, "SELECT rss_kib FROM process_tick WHERE sample_id = 2"), 5120);
  // Side rows only for the D-state writer and the unreadable io.
  EXPECT_EQ(db.execAndGet("SELECT group_concat(process_id) FROM (SELECT process_id FROM "
                          "process_io_sample ORDER BY process_id)")
                .getString(),
            "1,2");
}

TEST(TickRows, NamesAreStoredOnceAcrossWritesAndTables) {
  auto store = Store::create(":memory:");
  for (int i = 1; i <= 3; ++i) {
    Batch b;
    b.samples.push_back(tick(i));
    b.process_samples.push_back(quiet_row(i, 1));
    b.thread_samples.push_back(
        {.sample_id = i,
         .process_id = 1,
         .tid = 11,
         .comm = "ss-driver/0",
         .state = 'S',
         .wchan = "poll_schedule_timeout",
         .span_ns = i > 1 ? std::optional<std::int64_t>(kTickNs) : std::nullopt});
    store.write(b);
  }
  auto& db = store.db();
  EXPECT_EQ(count(db, "SELECT count(*) FROM wchan"), 1);
  EXPECT_EQ(count(db, "SELECT count(*) FROM thread_comm"), 1);
  EXPECT_EQ(count(db,
                  "SELECT count(*) FROM thread_sample WHERE comm = 'ss-driver/0' AND "
                  "wchan = 'poll_schedule_timeout'"),
            3);
  EXPECT_EQ(count(db, "SELECT count(*) FROM thread_sample WHERE span_ns IS NULL"), 1);
  EXPECT_EQ(count(db, "SELECT sum(span_ns) FROM thread_sample"), 2 * kTickNs);
  EXPECT_EQ(count(db, "SELECT count(*) FROM process_sample WHERE wchan = 'poll_schedule_timeout'"),
            3);
}

TEST(TickRows, ANameOfARolledBackWriteIsWrittenAgain) {
  auto store = Store::create(":memory:");
  Batch first;
  first.samples.push_back(tick(1));
  first.ash_ticks.push_back({.ash_tick = 1, .time_ns = 1, .duration_ns = 1});
  store.write(first);
  // The ash_tick row (written after the process rows) conflicts, so the
  // whole transaction, with the new wchan name it inserted, is rolled back.
  Batch failing;
  failing.process_samples.push_back(quiet_row(1, 1));
  failing.ash_ticks = first.ash_ticks;
  failing.process_samples.back().wchan = "anon_pipe_write";
  EXPECT_THROW(store.write(failing), Error);
  EXPECT_EQ(count(store.db(), "SELECT count(*) FROM wchan"), 0);
  Batch again;
  again.process_samples = failing.process_samples;
  store.write(again);
  EXPECT_EQ(store.db().execAndGet("SELECT wchan FROM process_sample").getString(),
            "anon_pipe_write");
}

TEST(TickRows, TheSameKeyAgainReplacesTheRowAndItsIoRow) {
  auto store = Store::create(":memory:");
  Batch b;
  b.samples.push_back(tick(1));
  b.samples.push_back(tick(2));
  auto row = quiet_row(2, 1);
  row.write_bytes = 8192;
  b.process_samples.push_back(row);
  store.write(b);
  Batch again;
  again.process_samples.push_back(quiet_row(2, 1));
  store.write(again);
  auto& db = store.db();
  EXPECT_EQ(count(db, "SELECT count(*) FROM process_sample"), 1);
  EXPECT_EQ(count(db, "SELECT write_bytes FROM process_sample"), 0);
  EXPECT_EQ(count(db, "SELECT count(*) FROM process_io_sample"), 0);
}

TEST(ProcessSampleScan, GivesTheViewsColumnsInKeyOrder) {
  auto store = Store::create(":memory:");
  Batch b;
  for (int i = 1; i <= 4; ++i) b.samples.push_back(tick(i));
  b.process_samples.push_back({.sample_id = 1, .process_id = 2, .state = 'S'});
  for (int i = 2; i <= 4; ++i) {
    for (int p = 1; p <= 3; ++p) {
      auto r = quiet_row(i, p);
      if (p == 2) r.wchan = "futex_do_wait";
      if (p == 3 && i == 3) {
        r.write_bytes = 65536;
        r.majflt = 4;
      }
      if (p == 1 && i == 4) r.span_ns = 3 * kTickNs;
      b.process_samples.push_back(r);
    }
  }
  store.write(b);
  auto& db = store.db();
  SQLite::Statement view(db,
                         "SELECT sample_id, process_id, state, cpu_ns, run_delay_ns, span_ns, "
                         "wchan, utime_ticks, stime_ticks, write_bytes, majflt FROM process_sample "
                         "WHERE sample_id >= 2 ORDER BY sample_id, process_id");
  ProcessSampleScan scan(db, 2);
  int rows = 0;
  while (view.executeStep()) {
    ASSERT_TRUE(scan.step()) << "row " << rows;
    for (int c = 0; c < 11; ++c) {
      const auto& v = view.getColumn(c);
      EXPECT_EQ(scan.is_null(c), v.isNull()) << "row " << rows << " column " << c;
      if (c == 2 || c == 6) {
        EXPECT_EQ(std::string(scan.text(c)), v.isNull() ? "" : v.getString())
            << "row " << rows << " column " << c;
      } else {
        EXPECT_EQ(scan.int64(c), v.getInt64()) << "row " << rows << " column " << c;
      }
    }
    ++rows;
  }
  EXPECT_FALSE(scan.step());
  EXPECT_EQ(rows, 9);
  // The io row's values, and 0 without one.
  EXPECT_EQ(count(db, "SELECT sum(write_bytes) FROM process_sample"), 65536);
  EXPECT_EQ(count(db, "SELECT sum(majflt) FROM process_sample"), 4);
  EXPECT_EQ(count(db, "SELECT count(*) FROM process_sample WHERE majflt IS NULL"), 1);
}

}  // namespace
}  // namespace stallscope::schema
