// The server's clock against this host's, for aligning a server-side
// `record` file with a `run` file. One dedicated connection (not a client's);
// each estimate makes `probes` bracketed round trips
//
//   t0 = client wall clock;  SELECT clock_timestamp();  t1 = client wall clock
//   offset = server_time - (t0 + t1) / 2
//
// and keeps the probe with the smallest round trip (measured with
// CLOCK_MONOTONIC): the true offset lies within ± rtt/2 of its estimate
// (plus the server's 1 µs timestamp resolution), whatever the network delay
// split between the two directions.
//
//   driver::ClockOffsetEstimator est(conninfo);   // throws Error(postgres)
//   schema::ClockOffsetRow row = est.estimate("start");
//   // row.offset_ns: server_ns = client_ns + offset_ns
#pragma once

#include <memory>
#include <string>

#include "schema/records.h"

namespace stallscope::driver {

class ClockOffsetEstimator {
 public:
  // Connects with application_name "stallscope/clock". Throws Error(postgres)
  // "cannot connect to <masked conninfo>: …".
  explicit ClockOffsetEstimator(const std::string& conninfo);
  ~ClockOffsetEstimator();
  ClockOffsetEstimator(ClockOffsetEstimator&&) noexcept;
  ClockOffsetEstimator& operator=(ClockOffsetEstimator&&) noexcept;

  // `probes` (≥ 1) round trips; returns the minimum-RTT one as a row:
  // time_ns = client wall clock at its middle, offset_ns, uncertainty_ns =
  // rtt/2, rtt_ns, probes, phase ("start" | "periodic" | "end"). Throws
  // Error(postgres) "cannot read the server clock: …" when a probe fails.
  schema::ClockOffsetRow estimate(const std::string& phase, int probes = 8);
  // From another thread: fails an estimate() blocked on a server that
  // stopped answering (pg::abort_socket); the estimator is unusable after.
  void abort() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stallscope::driver
