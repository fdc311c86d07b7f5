// Facts for memory_pressure, kernel_wait and connection_setup: host memory
// pressure, the query path's sleeps by kernel wait channel, and the driver's
// connections opened during the queries. Read per query-path process through
// the process_sample index (process_id, sample_id), so the cost follows the
// path's rows, not every process of the host.
#include <algorithm>
#include <array>

#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>

#include "correlate/detail.h"

namespace stallscope::correlate::detail {
namespace {

bool has_any(std::string_view w, std::initializer_list<std::string_view> parts) {
  return std::any_of(parts.begin(), parts.end(),
                     [&](std::string_view p) { return w.find(p) != std::string_view::npos; });
}

// First and last sample_id with time_ns in (A, B]; nullopt without samples.
std::optional<std::pair<std::int64_t, std::int64_t>> sample_range(SQLite::Database& db,
                                                                  std::int64_t A, std::int64_t B) {
  SQLite::Statement st(db,
                       "SELECT min(sample_id), max(sample_id) FROM sample "
                       "WHERE time_ns > ?1 AND time_ns <= ?2");
  st.bind(1, A);
  st.bind(2, B);
  st.executeStep();
  if (st.getColumn(0).isNull()) return std::nullopt;
  return std::pair{st.getColumn(0).getInt64(), st.getColumn(1).getInt64()};
}

void read_memory(SQLite::Database& db, Facts& f, std::int64_t A, std::int64_t B) {
  SQLite::Statement st(
      db,
      "SELECT count(*), sum(CASE WHEN m.psi_memory_some_us IS NOT NULL THEN s.interval_ns END), "
      "sum(m.psi_memory_some_us), sum(m.psi_memory_full_us), sum(m.major_faults), "
      "sum(m.swap_in_pages), sum(m.swap_out_pages) FROM host_memory_sample m "
      "JOIN sample s ON s.sample_id = m.sample_id WHERE s.time_ns > ?1 AND s.time_ns <= ?2");
  st.bind(1, A);
  st.bind(2, B);
  st.executeStep();
  auto v = [&](int c) { return st.getColumn(c).isNull() ? 0 : st.getColumn(c).getInt64(); };
  auto& m = f.memory;
  m.rows = v(0);
  m.psi_span_ns = v(1);
  m.psi_some_us = v(2);
  m.psi_full_us = v(3);
  m.major_faults = v(4);
  m.swap_in_pages = v(5);
  m.swap_out_pages = v(6);
}

// One row of a query-path task: its state and wchan at the tick.
void classify(Facts& f, const std::string& role, bool futex_counts, char state,
              const std::optional<std::string>& wchan) {
  if (state != 'S' && state != 'D') return;
  const std::string w = wchan.value_or("");
  const auto family = wchan_family(w);
  if (family == WchanFamily::memory) {
    ++f.memory.path_memory_d_rows;
    ++f.memory.path_memory_wchan_rows[w];
    return;
  }
  if (family == WchanFamily::other || (futex_counts && family == WchanFamily::futex)) {
    ++f.kernel.rows;
    ++f.kernel.rows_by_wait[fmt::format("{} {}", role, w)];
  }
}

// The driver's thread rows; its, the backends' and the poolers' process rows
// come from read_processes' scan through add_path_process_row.
void read_path_rows(SQLite::Database& db, const PathRoles& path, Facts& f, std::int64_t first_id,
                    std::int64_t last_id) {
  if (!path.driver_process_id) return;
  // The driver's own threads (ss-driver/N); its process row is the main
  // thread's, which only waits for the run to end.
  SQLite::Statement th(db,
                       "SELECT state, wchan FROM thread_sample WHERE process_id = ?1 AND "
                       "comm LIKE 'ss-driver/%' AND sample_id >= ?2 AND sample_id <= ?3");
  th.bind(1, *path.driver_process_id);
  th.bind(2, first_id);
  th.bind(3, last_id);
  while (th.executeStep()) {
    const auto state = th.getColumn(0).getString();
    std::optional<std::string> wchan;
    if (!th.getColumn(1).isNull()) wchan = th.getColumn(1).getString();
    classify(f, "driver", true, state.empty() ? '?' : state[0], wchan);
  }
}

void read_connections(SQLite::Database& db, Facts& f, std::int64_t A, std::int64_t B) {
  auto& c = f.connections;
  {
    SQLite::Statement st(db,
                         "SELECT count(*), sum(connect_latency_ns) FROM client "
                         "WHERE connect_ns >= ?1 AND connect_ns < ?2");
    st.bind(1, A);
    st.bind(2, B);
    st.executeStep();
    c.connections = st.getColumn(0).getInt64();
    c.connect_latency_ns = st.getColumn(1).isNull() ? 0 : st.getColumn(1).getInt64();
  }
  if (c.connections == 0) return;
  {
    // Connected → its first query sent (query rows name their connection).
    // One grouped scan of the query table (clustered by start time, so a
    // per-connection lookup would scan it once per connection).
    SQLite::Statement st(db,
                         "SELECT avg(f.first_ns - c.connect_ns) FROM client c JOIN (SELECT "
                         "client_id, connection, min(start_ns) AS first_ns FROM query WHERE "
                         "connection IS NOT NULL GROUP BY client_id, connection) f "
                         "USING (client_id, connection) WHERE c.connect_ns >= ?1 AND "
                         "c.connect_ns < ?2 AND f.first_ns >= c.connect_ns");
    st.bind(1, A);
    st.bind(2, B);
    if (st.executeStep() && !st.getColumn(0).isNull())
      c.first_query_gap_ns = static_cast<std::int64_t>(st.getColumn(0).getDouble());
  }
  // Sampled backends of those connections and how long each lived: from its
  // start to its last sampled tick. process_sample has no index by process,
  // so the last ticks come from one grouped scan, not one scan per backend.
  SQLite::Statement st(
      db,
      "WITH b AS (SELECT p.process_id, p.start_ns FROM client c JOIN process p ON p.pid = "
      "c.backend_pid AND p.start_ns IS NOT NULL AND p.start_ns <= c.connect_ns + ?3 AND "
      "p.start_ns >= c.connect_ns - ?3 WHERE c.connect_ns >= ?1 AND c.connect_ns < ?2), "
      "last AS (SELECT process_id, max(sample_id) AS sample_id FROM process_sample WHERE "
      "process_id IN (SELECT process_id FROM b) GROUP BY process_id) "
      "SELECT b.process_id, b.start_ns, s.time_ns FROM b LEFT JOIN last USING (process_id) "
      "LEFT JOIN sample s ON s.sample_id = last.sample_id");
  st.bind(1, A);
  st.bind(2, B);
  st.bind(3, kBackendStartSlackNs);
  while (st.executeStep()) {
    ++c.sampled_backends;
    if (st.getColumn(2).isNull()) continue;
    const auto lived = st.getColumn(2).getInt64() - st.getColumn(1).getInt64();
    if (lived < kShortLivedBackendNs) ++c.short_lived_backends;
  }
}

}  // namespace

WchanFamily wchan_family(std::string_view w) {
  if (w.empty() || w == "0" || w == "-") return WchanFamily::none;
  // Memory before storage: swap reads and reclaim also wait on pages.
  if (has_any(w, {"mem_cgroup", "shrink_", "reclaim", "try_to_free", "__alloc_pages",
                  "alloc_pages_slowpath", "swap", "compact", "kswapd", "oom", "memcg",
                  "throttle_direct"})) {
    return WchanFamily::memory;
  }
  if (has_any(w, {"folio_wait",
                  "wait_on_page",
                  "page_bit",
                  "submit_bio",
                  "jbd2",
                  "blk_",
                  "bio_",
                  "io_schedule",
                  "bit_wait_io",
                  "balance_dirty_pages",
                  "ext4_",
                  "xfs_",
                  "btrfs_",
                  "nfs_",
                  "filemap_fault",
                  "__lock_page",
                  "lock_page",
                  "fsync",
                  "file_write_and_wait",
                  "writeback",
                  "wait_on_buffer",
                  "__wait_on_bit",
                  "do_read_cache",
                  "iomap_",
                  "aio_",
                  "io_uring"})) {
    return WchanFamily::storage;
  }
  if (has_any(w, {"epoll", "ep_poll", "poll_schedule", "do_sys_poll", "do_select", "sys_select",
                  "unix_stream_read", "unix_dgram_recv", "sk_wait_data", "tcp_recvmsg",
                  "inet_csk_accept", "skb_wait_for_more", "__skb_wait", "wait_woken", "do_wait",
                  "sigsuspend", "sigtimedwait", "sys_pause"})) {
    return WchanFamily::latch;
  }
  if (has_any(w, {"futex"})) return WchanFamily::futex;
  return WchanFamily::other;
}

void add_path_process_row(Facts& f, const std::string& role, bool futex_counts, char state,
                          const std::optional<std::string>& wchan,
                          std::optional<std::int64_t> majflt) {
  if (majflt) f.memory.path_majflt += *majflt;
  if (role != "driver") classify(f, role, futex_counts, state, wchan);
}

void read_path_facts(SQLite::Database& db, const PathRoles& path, Facts& f, std::int64_t A,
                     std::int64_t B) {
  read_memory(db, f, A, B);
  if (auto range = sample_range(db, A, B)) read_path_rows(db, path, f, range->first, range->second);
  if (f.has_queries) read_connections(db, f, A, B);
}

}  // namespace stallscope::correlate::detail
