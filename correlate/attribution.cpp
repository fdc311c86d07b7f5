// Per-query attribution: the driver's connections → backend pids, and a
// forward sweep of the query table giving each backend's in-query time.
#include "correlate/attribution.h"

#include <algorithm>

namespace stallscope::correlate::detail {

namespace {
constexpr std::int64_t kDenseClients = 65536;
// The packed (client_id, connection) of a query without a connection.
constexpr std::int64_t kNoConnection = schema::kQuerySendNoConnection;
}  // namespace

BackendMap::BackendMap(const RowSource<schema::ClientBackend>& clients,
                       const Lookup<bool>& queries_name_connections) {
  for (schema::ClientBackend row; clients(row);) {
    const auto client = row.client_id;
    const auto connection = row.connection;
    const int pid = row.backend_pid;
    auto [it, added] = slot_of_pid_.emplace(pid, static_cast<int>(pid_of_slot_.size()));
    if (added) pid_of_slot_.push_back(pid);
    const int slot = it->second;
    if (client >= 0 && client < kDenseClients && connection >= 0 && connection < (1 << 24)) {
      if (static_cast<std::size_t>(client) >= by_client_.size()) by_client_.resize(client + 1);
      auto& conns = by_client_[static_cast<std::size_t>(client)];
      if (static_cast<std::size_t>(connection) >= conns.size()) conns.resize(connection + 1, -1);
      conns[static_cast<std::size_t>(connection)] = slot;
    } else {
      other_clients_[client * (std::int64_t{1} << 32) + connection] = slot;
    }
  }
  if (!pid_of_slot_.empty()) {
    queries_name_connections_ = queries_name_connections();
  }
}

int BackendMap::slot(std::int64_t client_id, std::optional<std::int64_t> connection) const {
  if (!connection) return -1;
  if (client_id >= 0 && static_cast<std::size_t>(client_id) < by_client_.size() &&
      *connection >= 0) {
    const auto& conns = by_client_[static_cast<std::size_t>(client_id)];
    return static_cast<std::size_t>(*connection) < conns.size()
               ? conns[static_cast<std::size_t>(*connection)]
               : -1;
  }
  if (other_clients_.empty()) return -1;
  auto it = other_clients_.find(client_id * (std::int64_t{1} << 32) + *connection);
  return it == other_clients_.end() ? -1 : it->second;
}

int BackendMap::slot_of_pid(int pid) const {
  auto it = slot_of_pid_.find(pid);
  return it == slot_of_pid_.end() ? -1 : it->second;
}

QuerySweep::QuerySweep(RowSource<Row> rows, const BackendMap& map)
    : map_(map), rows_(std::move(rows)), busy_(map.slots()) {}

void QuerySweep::feed(const Row& row) {
  ++queries_;
  const auto connection = row.key & kNoConnection;
  const auto slot =
      connection == kNoConnection ? -1 : map_.slot(row.key >> 24, std::optional(connection));
  if (slot < 0) return;
  ++joined_;
  const auto start = row.start_ns;
  const auto sent = row.sent_ns;
  const auto end = std::max(sent, row.answered_ns);
  auto& q = busy_[static_cast<std::size_t>(slot)];
  if (!q.empty() && sent <= q.back().end_ns) {
    q.back().end_ns = std::max(q.back().end_ns, end);
  } else {
    const auto before =
        q.empty() ? 0 : q.back().busy_before_ns + q.back().end_ns - q.back().start_ns;
    q.push_back({sent, end, before});
  }
  while (q.size() > 1 && q.front().end_ns < start - kAttributionKeepNs) q.pop_front();
}

void QuerySweep::advance_to(std::int64_t t) {
  if (t <= point_ns_) return;
  point_ns_ = t;
  while (!done_) {
    if (!pending_) {
      if (!rows_(row_)) {
        done_ = true;
        break;
      }
      pending_ = true;
    }
    if (row_.start_ns >= t) break;
    pending_ = false;
    feed(row_);
  }
}

void QuerySweep::finish() {
  advance_to(INT64_MAX);
}

std::int64_t QuerySweep::busy_until(int slot, std::int64_t t) const {
  const auto& q = busy_[static_cast<std::size_t>(slot)];
  if (q.empty()) return 0;
  // The last interval starting at or before t.
  auto it = std::upper_bound(q.begin(), q.end(), t,
                             [](std::int64_t x, const Interval& iv) { return x < iv.start_ns; });
  if (it == q.begin()) return q.front().busy_before_ns;
  --it;
  return it->busy_before_ns + std::min(t, it->end_ns) - it->start_ns;
}

std::int64_t QuerySweep::busy_ns(int slot, std::int64_t from_ns, std::int64_t to_ns) const {
  if (slot < 0 || static_cast<std::size_t>(slot) >= busy_.size() || to_ns <= from_ns) return 0;
  return std::max<std::int64_t>(0, busy_until(slot, to_ns) - busy_until(slot, from_ns));
}

}  // namespace stallscope::correlate::detail
