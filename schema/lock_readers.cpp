// The lock chain readers (lock_readers.h).
#include "schema/lock_readers.h"

#include <algorithm>

#include "common/parse.h"
#include "schema/row.h"

namespace stallscope::schema {
namespace {

std::optional<std::int64_t> opt(const Cursor& st, int column) {
  return st.opt_int64(column);
}

}  // namespace

std::vector<int> parse_blocking_pids(std::string_view text) {
  std::vector<int> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    if (auto pid = common::parse_int(text.substr(0, comma))) out.push_back(*pid);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

std::vector<LockPoll> read_lock_polls(Store& store, std::int64_t from_ns, std::int64_t to_ns) {
  std::vector<LockPoll> out;
  {
    Cursor st(store.db(),
              "SELECT a.ash_tick, a.time_ns, a.pid, a.backend_type, a.state, a.wait_event_type, "
              "a.wait_event, a.application_name, t.query, a.xact_start_ns, a.query_start_ns, "
              "a.state_change_ns, a.blocking_pids FROM pg_activity_sample a LEFT JOIN "
              "pg_query_text t ON t.query_text_id = a.query_text_id WHERE a.time_ns >= ?1 AND "
              "a.time_ns < ?2 AND a.ash_tick IN (SELECT ash_tick FROM pg_activity_sample WHERE "
              "time_ns >= ?1 AND time_ns < ?2 AND wait_event_type = 'Lock') "
              "ORDER BY a.ash_tick, a.pid");
    st.bind(1, from_ns);
    st.bind(2, to_ns);
    while (st.step()) {
      const auto tick = st.int64(0);
      if (out.empty() || out.back().ash_tick != tick) {
        out.push_back({.ash_tick = tick, .time_ns = st.int64(1), .sessions = {}, .waits = {}});
      }
      out.back().sessions.push_back({.pid = static_cast<int>(st.int64(2)),
                                     .backend_type = std::string(st.text(3)),
                                     .state = std::string(st.text(4)),
                                     .wait_event_type = std::string(st.text(5)),
                                     .wait_event = std::string(st.text(6)),
                                     .application_name = std::string(st.text(7)),
                                     .query = std::string(st.text(8)),
                                     .xact_start_ns = opt(st, 9),
                                     .query_start_ns = opt(st, 10),
                                     .state_change_ns = opt(st, 11),
                                     .blocking_pids = parse_blocking_pids(st.text(12))});
    }
  }
  if (out.empty() || !detail::table_exists(store, "pg_lock_wait")) {
    return out;
  }
  Cursor st(store.db(),
            "SELECT ash_tick, pid, locktype, mode, database_oid, relation_oid, relation_name, "
            "page, tuple, virtualxid, transactionid, classid, objid, objsubid, write_relation_name "
            "FROM pg_lock_wait "
            "WHERE ash_tick >= ?1 AND ash_tick <= ?2 ORDER BY ash_tick, pid");
  st.bind(1, out.front().ash_tick);
  st.bind(2, out.back().ash_tick);
  auto poll = out.begin();
  while (st.step()) {
    const auto tick = st.int64(0);
    while (poll != out.end() && poll->ash_tick < tick) ++poll;
    if (poll == out.end()) break;
    if (poll->ash_tick != tick) continue;
    poll->waits.push_back({.pid = static_cast<int>(st.int64(1)),
                           .locktype = std::string(st.text(2)),
                           .mode = std::string(st.text(3)),
                           .database_oid = opt(st, 4),
                           .relation_oid = opt(st, 5),
                           .relation_name = std::string(st.text(6)),
                           .page = opt(st, 7),
                           .tuple = opt(st, 8),
                           .virtualxid = std::string(st.text(9)),
                           .transactionid = opt(st, 10),
                           .classid = opt(st, 11),
                           .objid = opt(st, 12),
                           .objsubid = opt(st, 13),
                           .write_relation_name = std::string(st.text(14))});
  }
  return out;
}

}  // namespace stallscope::schema
