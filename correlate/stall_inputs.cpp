// What the stall rules (stalls.cpp) read from the run file beyond the
// windows' sums: queries that lost their connection, and the query a
// blocking backend was running.
#include <memory>

#include <fmt/format.h>

#include "correlate/passes.h"
#include "schema/run_reader.h"

namespace stallscope::correlate::detail {

// Connection-loss errors per window with errors (a range read each):
// SQLSTATE class 08 or 57P01–57P03.
void count_connection_errors(schema::Store& store, const std::vector<Window>& windows,
                             std::vector<WindowSignals>& signals) {
  schema::ConnectionErrors lost(store);
  for (std::size_t i = 0; i < windows.size() && i < signals.size(); ++i) {
    const auto& w = windows[i];
    if (w.errors == 0) continue;
    for (auto& e : lost.between(w.start_ns, w.end_ns)) {
      if (signals[i].top_connection_sqlstate.empty()) {
        signals[i].top_connection_sqlstate = std::move(e.sqlstate);
      }
      signals[i].connection_errors += e.queries;
    }
  }
}

// "query (state)", or the query alone when the state is unknown; "" when ASH
// never saw the pid by then.
std::function<std::string(int, std::int64_t)> blocker_queries(schema::Store& store) {
  auto activity = std::make_shared<schema::ActivityLookup>(store);
  return [activity](int pid, std::int64_t t) {
    auto a = activity->latest(pid, t);
    if (!a) return std::string();
    return a->state.empty() ? a->query : fmt::format("{} ({})", a->query, a->state);
  };
}

}  // namespace stallscope::correlate::detail
