// What the stall rules (stalls.cpp) read from the run file beyond the
// windows' sums: queries that lost their connection, and the query a
// blocking backend was running.
#include <memory>

#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>

#include "correlate/passes.h"

namespace stallscope::correlate::detail {

// Connection-loss errors per window with errors (a range read each):
// SQLSTATE class 08 or 57P01–57P03.
void count_connection_errors(SQLite::Database& db, const std::vector<Window>& windows,
                             std::vector<WindowSignals>& signals) {
  SQLite::Statement lost(db,
                         "SELECT sqlstate, count(*) FROM query_error WHERE start_ns >= ?1 AND "
                         "start_ns < ?2 AND (sqlstate LIKE '08%' OR sqlstate IN ('57P01', "
                         "'57P02', '57P03')) GROUP BY sqlstate ORDER BY 2 DESC");
  for (std::size_t i = 0; i < windows.size() && i < signals.size(); ++i) {
    const auto& w = windows[i];
    if (w.errors == 0) continue;
    lost.reset();
    lost.bind(1, static_cast<int64_t>(w.start_ns));
    lost.bind(2, static_cast<int64_t>(w.end_ns));
    while (lost.executeStep()) {
      if (signals[i].top_connection_sqlstate.empty()) {
        signals[i].top_connection_sqlstate = lost.getColumn(0).getString();
      }
      signals[i].connection_errors += lost.getColumn(1).getInt64();
    }
  }
}

// "query (state)", or the query alone when the state is unknown; "" when ASH
// never saw the pid by then.
std::function<std::string(int, std::int64_t)> blocker_queries(SQLite::Database& db) {
  auto blocker = std::make_shared<SQLite::Statement>(
      db,
      "SELECT coalesce(t.query, ''), coalesce(a.state, '') FROM pg_activity_sample a LEFT JOIN "
      "pg_query_text t ON t.query_text_id = a.query_text_id WHERE a.pid = ?1 AND a.time_ns <= ?2 "
      "ORDER BY a.time_ns DESC LIMIT 1");
  return [blocker](int pid, std::int64_t t) {
    blocker->reset();
    blocker->bind(1, pid);
    blocker->bind(2, t);
    if (!blocker->executeStep()) return std::string();
    auto q = blocker->getColumn(0).getString();
    auto state = blocker->getColumn(1).getString();
    return state.empty() ? q : fmt::format("{} ({})", q, state);
  };
}

}  // namespace stallscope::correlate::detail
