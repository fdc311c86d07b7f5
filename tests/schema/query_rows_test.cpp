// The query insert path of Store::write: query rows go in through multi-row
// statements (the tail one by one), their errors to query_error, skipped
// transactions to query_skipped; every row must come back exactly, NULLs
// included.
#include <algorithm>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <SQLiteCpp/Statement.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "schema/store.h"
#include "schema/writer.h"
#include "support/test_support.h"

namespace stallscope::schema {
namespace {

// A transaction per kind the driver and import-pgbench produce, with values
// that use the whole width of their columns, added to `b`; returns what
// `expected` should read back for it (nullopt: skipped, not in `query`).
using Stored = std::tuple<std::int64_t, int, std::int64_t, std::int64_t, std::optional<int>,
                          std::optional<std::int64_t>, std::optional<std::int64_t>,
                          std::optional<std::string>, std::optional<std::string>>;
using StoredSkip = std::tuple<std::int64_t, int, std::int64_t, std::int64_t>;

void add_row(int i, std::mt19937_64& rng, Batch& b, std::vector<Stored>& want,
             std::vector<StoredSkip>& want_skips) {
  QueryRow r{
      .client_id = i % 7,
      .seq = i / 7 + (std::int64_t{1} << 33),
      .start_ns = 1'764'000'000'000'000'000 + static_cast<std::int64_t>(rng() % 1'000'000'000),
      .latency_ns = static_cast<std::int64_t>(rng() % (std::int64_t{1} << 41)),
  };
  std::optional<std::string> sqlstate, error;
  switch (i % 9) {
    case 0:  // failed: SQLSTATE and message, no row count
      sqlstate = "40P01";
      error = "deadlock detected";
      r.connection = i % 5;
      b.query_errors.push_back({.client_id = r.client_id,
                                .seq = r.seq,
                                .start_ns = r.start_ns,
                                .sqlstate = *sqlstate,
                                .error = error});
      break;
    case 1:  // -R: schedule lag
      r.lag_ns = static_cast<std::int64_t>(rng() % 1'000'000);
      r.rows = 1;
      r.connection = 3;
      break;
    case 2:  // --skip-late: not sent, so only in query_skipped
      b.query_skips.push_back(
          {.client_id = r.client_id, .seq = r.seq, .start_ns = r.start_ns, .lag_ns = 9'000'000});
      want_skips.emplace_back(r.start_ns, r.client_id, r.seq, 9'000'000);
      return;
    case 3:  // imported: no connection, rows unknown
      break;
    case 4:  // zero rows on connection 0 (0, not NULL)
      r.rows = 0;
      r.connection = 0;
      break;
    default:  // the common case
      r.rows = static_cast<std::int64_t>(rng() % 100'000);
      r.connection = i % 3;
      break;
  }
  b.queries.push_back(r);
  want.emplace_back(r.start_ns, r.client_id, r.seq, r.latency_ns, r.connection, r.rows, r.lag_ns,
                    sqlstate, error);
}

template <typename T>
std::optional<T> opt(const SQLite::Column& c) {
  if (c.isNull()) return std::nullopt;
  if constexpr (std::is_same_v<T, std::string>) {
    return c.getString();
  } else {
    return static_cast<T>(c.getInt64());
  }
}

// Every stored query with its error, if any, in key order; the types are
// checked too (an integer column must hold an integer, a text column text).
std::vector<Stored> stored_rows(const std::string& path) {
  auto ro = Store::open_readonly(path);
  SQLite::Statement q(ro.db(),
                      "SELECT start_ns, client_id, seq, latency_ns, connection, rows, lag_ns, "
                      "sqlstate, error, typeof(connection) IN ('integer', 'null') AND "
                      "typeof(rows) IN ('integer', 'null') AND typeof(lag_ns) IN ('integer', "
                      "'null') AND typeof(sqlstate) IN ('text', 'null') AND typeof(error) IN "
                      "('text', 'null') FROM query LEFT JOIN query_error USING (start_ns, "
                      "client_id, seq) ORDER BY start_ns, client_id, seq");
  std::vector<Stored> out;
  while (q.executeStep()) {
    EXPECT_EQ(q.getColumn(9).getInt(), 1) << "wrong storage class in row " << out.size();
    out.emplace_back(q.getColumn(0).getInt64(), q.getColumn(1).getInt(), q.getColumn(2).getInt64(),
                     q.getColumn(3).getInt64(), opt<int>(q.getColumn(4)),
                     opt<std::int64_t>(q.getColumn(5)), opt<std::int64_t>(q.getColumn(6)),
                     opt<std::string>(q.getColumn(7)), opt<std::string>(q.getColumn(8)));
  }
  EXPECT_EQ(ro.db()
                .execAndGet("SELECT count(*) FROM query_error LEFT JOIN query USING (start_ns, "
                            "client_id, seq) WHERE query.latency_ns IS NULL")
                .getInt(),
            0)
      << "an error row without its query";
  return out;
}

std::vector<StoredSkip> stored_skips(const std::string& path) {
  auto ro = Store::open_readonly(path);
  SQLite::Statement q(ro.db(),
                      "SELECT start_ns, client_id, seq, lag_ns FROM query_skipped ORDER BY "
                      "start_ns, client_id, seq");
  std::vector<StoredSkip> out;
  while (q.executeStep()) {
    out.emplace_back(q.getColumn(0).getInt64(), q.getColumn(1).getInt(), q.getColumn(2).getInt64(),
                     q.getColumn(3).getInt64());
  }
  return out;
}

TEST(QueryRows, RoundTripExactlyOverSeveralBatchesInOneWrite) {
  test::TempDir dir;
  auto path = dir.file("run.db");
  std::mt19937_64 rng(7);
  // Three batches in no particular order, sizes around the 32-row statement:
  // full statements, a tail, and plain runs cut by other rows.
  std::vector<Batch> batches(3);
  std::vector<Stored> want;
  std::vector<StoredSkip> want_skips;
  int i = 0;
  for (auto [b, n] : {std::pair{0, 1000}, std::pair{1, 33}, std::pair{2, 31}}) {
    for (int k = 0; k < n; ++k, ++i) {
      add_row(i, rng, batches[static_cast<std::size_t>(b)], want, want_skips);
    }
  }
  // A long run of plain rows only (several full multi-row statements).
  for (int k = 0; k < 200; ++k, ++i) {
    QueryRow r{
        .client_id = 1, .seq = i, .start_ns = 5 + k, .latency_ns = k, .rows = k, .connection = 2};
    want.emplace_back(r.start_ns, r.client_id, r.seq, r.latency_ns, r.connection, r.rows,
                      std::nullopt, std::nullopt, std::nullopt);
    batches[1].queries.push_back(r);
  }
  {
    auto store = Store::create(path);
    store.begin_run(test::run_info());
    store.write(std::span<const Batch>(batches));
  }
  std::sort(want.begin(), want.end(), [](const Stored& x, const Stored& y) {
    return std::tie(std::get<0>(x), std::get<1>(x), std::get<2>(x)) <
           std::tie(std::get<0>(y), std::get<1>(y), std::get<2>(y));
  });
  auto got = stored_rows(path);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) EXPECT_EQ(got[k], want[k]) << "row " << k;
  std::sort(want_skips.begin(), want_skips.end());
  EXPECT_EQ(stored_skips(path), want_skips);
  EXPECT_FALSE(want_skips.empty());
}

TEST(QueryRows, WriterStoresEveryRowOfInterleavedBatchesExactly) {
  test::TempDir dir;
  auto path = dir.file("run.db");
  std::mt19937_64 rng(11);
  std::vector<Stored> want;
  std::vector<StoredSkip> want_skips;
  auto store = Store::create(path);
  store.begin_run(test::run_info());
  {
    Writer writer(std::move(store), 5'000'000);
    for (int b = 0; b < 40; ++b) {
      Batch batch;
      for (int k = 0; k < 97; ++k) add_row(b * 97 + k, rng, batch, want, want_skips);
      writer.submit(std::move(batch));
    }
    writer.close(9'000, "complete", "done");
    const auto errors = std::count_if(want.begin(), want.end(),
                                      [](const Stored& r) { return std::get<7>(r).has_value(); });
    EXPECT_EQ(writer.rows_committed(),
              static_cast<std::int64_t>(want.size() + want_skips.size()) + errors);
  }
  std::sort(want.begin(), want.end());
  auto got = stored_rows(path);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  std::sort(want_skips.begin(), want_skips.end());
  EXPECT_EQ(stored_skips(path), want_skips);
}

TEST(QueryRows, FailedWriteStoresNothingAndTheNextWriteWorks) {
  test::TempDir dir;
  auto path = dir.file("run.db");
  auto store = Store::create(path);
  store.begin_run(test::run_info());
  Batch bad;
  for (int k = 0; k < 40; ++k) {
    bad.queries.push_back({.client_id = 0, .seq = k, .start_ns = 100 + k, .latency_ns = 1});
  }
  bad.queries.push_back(bad.queries[5]);  // same key twice, inside a 32-row statement
  EXPECT_THROW(store.write(bad), Error);
  EXPECT_EQ(store.db().execAndGet("SELECT count(*) FROM query").getInt(), 0);
  bad.queries.pop_back();
  store.write(bad);
  EXPECT_EQ(store.db().execAndGet("SELECT count(*) || ':' || sum(seq) FROM query").getString(),
            "40:780");
}

}  // namespace
}  // namespace stallscope::schema
