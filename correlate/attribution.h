// Per-query attribution (internal to the correlator): which backend served
// each query, and when each backend was serving one, so that the server
// parts of the time accounting count a backend's samples only while it
// served this run's queries.
//
//   schema::ClientBackendScan clients(store);
//   detail::BackendMap map(rows_from<schema::ClientBackend>(clients), has_connections);
//   schema::QuerySendScan sends(store, until_ns);
//   detail::QuerySweep sweep(rows_from<schema::QuerySend>(sends), map);  // one forward scan
//   sweep.advance_to(t);                     // feeds the queries sent before t
//   sweep.busy_ns(map.slot_of_pid(pid), t - span, t);  // its in-query time there
//
// Memory: the map holds one entry per driver connection; the sweep holds,
// per backend, its merged query intervals of the last kAttributionKeepNs
// only — it does not grow with the number of queries.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/units.h"
#include "correlate/row_source.h"
#include "schema/attribution_readers.h"

namespace stallscope::correlate::detail {

// How far behind the sweep point a backend's query intervals are kept:
// longer than any process_sample span the correlator reads (60 s).
inline constexpr std::int64_t kAttributionKeepNs = 120 * common::kNsPerS;
// An instantaneous observation (a D-state row, an ASH poll) at time t counts
// as inside a query when the backend served one within t ± this much: the
// sampler reads /proc and pg_stat_activity a little after the tick's time.
inline constexpr std::int64_t kAttributionSlackNs = 2 * common::kNsPerMs;

// The driver's connections: (client_id, connection) → the backend pid that
// served them (client.backend_pid), each distinct pid a dense slot.
class BackendMap {
 public:
  // `clients`: the client rows with a backend pid (schema::ClientBackendScan);
  // `queries_name_connections` (schema::queries_name_connections) is asked
  // only when some row has one.
  BackendMap(const RowSource<schema::ClientBackend>& clients,
             const Lookup<bool>& queries_name_connections);
  // The slot of the backend that served (client_id, connection), or -1
  // (no such connection, no backend pid, or connection NULL: not connected,
  // or imported).
  int slot(std::int64_t client_id, std::optional<std::int64_t> connection) const;
  // The slot of a backend pid, or -1 when it served none of the connections.
  int slot_of_pid(int pid) const;
  std::size_t slots() const { return pid_of_slot_.size(); }
  bool empty() const { return pid_of_slot_.empty(); }
  // Whether any query row names its connection (files written by hand or
  // before query.connection existed do not: their queries cannot be joined).
  bool queries_name_connections() const { return queries_name_connections_; }

 private:
  std::vector<std::vector<int>> by_client_;              // [client_id][connection] → slot
  std::unordered_map<std::int64_t, int> other_clients_;  // client ids ≥ 65536: key → slot
  std::unordered_map<int, int> slot_of_pid_;
  std::vector<int> pid_of_slot_;
  bool queries_name_connections_ = false;
};

// The union of each backend's query intervals [sent, answered), built by one
// forward scan of the query table (clustered by start_ns). A query's
// interval starts when it was sent (start_ns + lag_ns under -R) and ends
// at start_ns + latency_ns.
class QuerySweep {
 public:
  using Row = schema::QuerySend;
  // `rows`: the queries in start_ns order (schema::QuerySendScan, or
  // schema::QuerySendBatches to read them on another core); what reading
  // them throws comes out of advance_to/finish.
  QuerySweep(RowSource<Row> rows, const BackendMap& map);
  // Feeds every sent query with start_ns < t; t never decreases (a smaller t
  // is a no-op).
  void advance_to(std::int64_t t);
  // Time in [from_ns, to_ns) the backend in `slot` spent serving queries; exact
  // when every query sent before to_ns was fed and from_ns is within
  // kAttributionKeepNs of the sweep point. 0 for slot −1.
  std::int64_t busy_ns(int slot, std::int64_t from_ns, std::int64_t to_ns) const;
  // Feeds the remaining queries (for the counts below).
  void finish();
  std::int64_t queries() const { return queries_; }  // sent queries fed
  std::int64_t joined() const { return joined_; }    // of those, with a backend slot

 private:
  struct Interval {
    std::int64_t start_ns, end_ns;
    std::int64_t busy_before_ns;  // the backend's in-query time before start_ns
  };
  std::int64_t busy_until(int slot, std::int64_t t) const;
  void feed(const Row& row);

  const BackendMap& map_;
  RowSource<Row> rows_;
  bool pending_ = false;  // `row_` was read but not yet fed
  Row row_{};
  bool done_ = false;
  std::int64_t point_ns_ = INT64_MIN;  // every query with start_ns < point_ns_ was fed
  std::vector<std::deque<Interval>> busy_;
  std::int64_t queries_ = 0;
  std::int64_t joined_ = 0;
};

}  // namespace stallscope::correlate::detail
