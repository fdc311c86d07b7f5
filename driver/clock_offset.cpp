#include "driver/clock_offset.h"

#include <libpq-fe.h>

#include <limits>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/pg.h"
#include "common/units.h"

namespace stallscope::driver {

struct ClockOffsetEstimator::Impl {
  pg::Conn conn;
};

ClockOffsetEstimator::ClockOffsetEstimator(const std::string& conninfo)
    : impl_(std::make_unique<Impl>()) {
  impl_->conn = pg::connect(conninfo, "stallscope/clock");
}

ClockOffsetEstimator::~ClockOffsetEstimator() = default;

void ClockOffsetEstimator::abort() noexcept {
  pg::abort_socket(impl_->conn.get());
}
ClockOffsetEstimator::ClockOffsetEstimator(ClockOffsetEstimator&&) noexcept = default;
ClockOffsetEstimator& ClockOffsetEstimator::operator=(ClockOffsetEstimator&&) noexcept = default;

schema::ClockOffsetRow ClockOffsetEstimator::estimate(const std::string& phase, int probes) {
  if (probes < 1) probes = 1;
  PGconn* conn = impl_->conn.get();
  // Microseconds since the epoch as an integer: no timestamp parsing, no
  // time zone.
  static constexpr const char* kSql =
      "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8";
  schema::ClockOffsetRow best;
  best.rtt_ns = std::numeric_limits<std::int64_t>::max();
  for (int i = 0; i < probes; ++i) {
    const std::int64_t mono0 = mono_now_ns();
    const std::int64_t wall0 = wall_now_ns();
    pg::Result res(PQexecParams(conn, kSql, 0, nullptr, nullptr, nullptr, nullptr, 0));
    const std::int64_t wall1 = wall_now_ns();
    const std::int64_t mono1 = mono_now_ns();
    if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK || PQntuples(res.get()) != 1) {
      throw Error(ErrorKind::postgres,
                  fmt::format("cannot read the server clock: {}", pg::error_message(conn)));
    }
    const auto server_us = pg::int64_or_null(res.get(), 0, 0);
    if (!server_us) {
      throw Error(ErrorKind::postgres,
                  "cannot read the server clock: clock_timestamp() gave no integer");
    }
    const std::int64_t server_ns = *server_us * common::kNsPerUs;
    const std::int64_t rtt_ns = mono1 - mono0;
    if (rtt_ns < best.rtt_ns) {
      const std::int64_t middle_ns = wall0 + (wall1 - wall0) / 2;
      best.time_ns = middle_ns;
      best.offset_ns = server_ns - middle_ns;
      best.rtt_ns = rtt_ns;
      best.uncertainty_ns = rtt_ns / 2;
    }
  }
  best.probes = probes;
  best.phase = phase;
  return best;
}

}  // namespace stallscope::driver
