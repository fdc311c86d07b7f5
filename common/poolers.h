// The connection poolers known by process name (comm): pgbouncer, pgcat,
// odyssey, pgpool. Behind one, a session's socket belongs to the pooler, a
// hop on the query path, not to the client; the sampler (sampler/sockets.cpp)
// and the correlator (correlate/) tell them apart by this list.
//
//   if (common::is_pooler_comm("pgbouncer")) …  // true
#pragma once

#include <string_view>

namespace stallscope::common {

inline constexpr std::string_view kPoolerComms[] = {"pgbouncer", "pgcat", "odyssey", "pgpool"};

inline bool is_pooler_comm(std::string_view comm) {
  for (const auto name : kPoolerComms) {
    if (comm == name) return true;
  }
  return false;
}

}  // namespace stallscope::common
