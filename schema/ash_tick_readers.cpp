// The SQL behind ash_tick_readers.h.
#include "schema/ash_tick_readers.h"

namespace stallscope::schema {

AshPolls::AshPolls(Store& store, std::int64_t from_ns, std::int64_t to_ns)
    : st_(store.db(),
          "SELECT time_ns, duration_ns FROM ash_tick WHERE time_ns >= ?1 AND time_ns <= ?2 "
          "ORDER BY time_ns") {
  st_.bind(1, from_ns);
  st_.bind(2, to_ns);
}

bool AshPolls::next(AshPoll& poll) {
  if (!st_.step()) return false;
  poll = {st_.int64(0), st_.int64(1)};
  return true;
}

}  // namespace stallscope::schema
