// The run-file fixture of the correlator's tests (tests/correlate/*_test.cpp):
// a hand-made run file with exact numbers, and lookups into a report.
//
// The base fixture: 2 clients, 10 s. Each client sends one 1 s query per
// second from t0, so the query span is [t0, t0 + 10 s) and the client time
// N·W is 20 s. Samples tick every second at t0 + i s (i = 0..10); host CPU
// deltas (on i = 1..10) and process rows (at i = 1..10) each cover the
// second before their tick. ASH polls
// every 100 ms (t0 + k·100 ms, k = 0..100).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "correlate/format.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate::test_run {

using test::kMs;
using test::kS;
inline constexpr std::int64_t kUs = 1'000;
inline constexpr std::int64_t kT0 = 1'700'000'000 * kS;

inline constexpr int kDriverPid = 100;
inline constexpr std::int64_t kDriverId = 1;
inline constexpr int kBackendPid[2] = {201, 202};
inline constexpr std::int64_t kBackendId[2] = {2, 3};

struct HostCpu {
  std::int64_t user_ms = 100, system_ms = 0, idle_ms = 1900, iowait_ms = 0, steal_ms = 0;
  int procs_running = 1;
  int d_state = 0;
};

class Fixture {
 public:
  explicit Fixture(bool with_queries = true, int clients = 2)
      : store_(schema::Store::create(":memory:")) {
    schema::RunInfo r;
    r.mode = with_queries ? "run" : "record";
    r.host = "db1";
    r.kernel = "6.1.0";
    r.cores = 2;
    r.clock_ticks_per_s = 100;
    r.start_ns = kT0 - 2 * kS;
    r.command_line = "stallscope run";
    r.tool_version = "fixture";
    r.hz = 10;
    r.stallscope_pid = kDriverPid;
    r.stallscope_start_ticks = 5000;
    if (with_queries) {
      r.clients = clients;
      r.threads = 1;
      r.protocol = "simple";
      r.sql = "SELECT 1";
    }
    store_.begin_run(r);
    store_.end_run(kT0 + 11 * kS, "complete", "duration reached");
    b_.processes.push_back({.process_id = kDriverId,
                            .pid = kDriverPid,
                            .start_ticks = 5000,
                            .start_ns = kT0 - 3 * kS,
                            .comm = "stallscope",
                            .first_sample_id = 1});
    if (with_queries) {
      for (int c = 0; c < 2; ++c) {
        b_.processes.push_back({.process_id = kBackendId[c],
                                .pid = kBackendPid[c],
                                .start_ticks = 6000 + c,
                                .start_ns = kT0 - 2 * kS,
                                .comm = "postgres",
                                .first_sample_id = 1});
        b_.clients.push_back({.client_id = c,
                              .thread = 0,
                              .backend_pid = kBackendPid[c],
                              .connect_ns = kT0 - 2 * kS + 10 * kMs});
        for (int k = 0; k < 10; ++k) {
          b_.queries.push_back(
              {.client_id = c, .seq = k, .start_ns = kT0 + k * kS, .latency_ns = kS});
        }
      }
    }
    for (int k = 0; k <= 100; ++k) {
      b_.ash_ticks.push_back(
          {.ash_tick = k + 1, .time_ns = kT0 + k * 100 * kMs, .duration_ns = kMs});
    }
  }

  // Samples at t0 + i s, i = 0..10, each with 10 ms of sampler CPU; host CPU
  // deltas on all but the first.
  void host(const HostCpu& h) {
    for (int i = 0; i <= 10; ++i) {
      b_.samples.push_back({.sample_id = i + 1,
                            .time_ns = kT0 + i * kS,
                            .mono_ns = i * kS,
                            .interval_ns = i ? std::optional<std::int64_t>(kS) : std::nullopt,
                            .sampler_cpu_ns = 10 * kMs,
                            .sampler_duration_ns = kMs});
      schema::HostSampleRow row{.sample_id = i + 1};
      if (i > 0) {
        row.cpu_user_ns = h.user_ms * kMs;
        row.cpu_nice_ns = 0;
        row.cpu_system_ns = h.system_ms * kMs;
        row.cpu_idle_ns = h.idle_ms * kMs;
        row.cpu_iowait_ns = h.iowait_ms * kMs;
        row.cpu_irq_ns = 0;
        row.cpu_softirq_ns = 0;
        row.cpu_steal_ns = h.steal_ms * kMs;
      }
      row.procs_running = h.procs_running;
      row.processes_d_state = h.d_state;
      b_.host_samples.push_back(row);
    }
  }

  void process(std::int64_t id, int pid, const std::string& comm, std::int64_t start_ns) {
    b_.processes.push_back({.process_id = id,
                            .pid = pid,
                            .start_ticks = 7000 + id,
                            .start_ns = start_ns,
                            .comm = comm,
                            .first_sample_id = 1});
  }

  // Rows at samples i = 1..10 (`d_rows` of them, the first ones, in state D).
  void rows(std::int64_t id, std::int64_t cpu_ms, std::int64_t run_delay_ms = 0, int d_rows = 0,
            const std::string& wchan = "folio_wait_bit_common") {
    for (int i = 1; i <= 10; ++i) {
      schema::ProcessSampleRow r{.sample_id = i + 1, .process_id = id};
      r.state = i <= d_rows ? 'D' : 'S';
      if (i <= d_rows) r.wchan = wchan;
      r.cpu_ns = cpu_ms * kMs;
      r.run_delay_ns = run_delay_ms * kMs;
      r.span_ns = kS;
      b_.process_samples.push_back(r);
    }
  }

  // `ticks` ASH rows for `pid` on polls k = first .. first + ticks − 1.
  void ash(int pid, const std::optional<std::string>& type, const std::optional<std::string>& event,
           int ticks, int first = 0, const std::string& state = "active") {
    for (int k = first; k < first + ticks; ++k) {
      b_.pg_activity.push_back({.time_ns = kT0 + k * 100 * kMs,
                                .ash_tick = k + 1,
                                .pid = pid,
                                .backend_type = "client backend",
                                .state = state,
                                .wait_event_type = type,
                                .wait_event = event});
    }
  }

  // Each client: one query of `latency_ns` after another from t0 to t0 + 10 s
  // (after the constructor's, unless the test clears them).
  void steady_queries(std::int64_t latency_ns) {
    for (int c = 0; c < 2; ++c) {
      int seq = 0;
      for (std::int64_t t = 0; t < 10 * kS; t += latency_ns)
        b_.queries.push_back(
            {.client_id = c, .seq = seq++, .start_ns = kT0 + t, .latency_ns = latency_ns});
    }
  }

  // A row of `id` at sample i (t0 + i s) covering the second before it.
  void row(std::int64_t id, int i, char state, std::optional<std::string> wchan,
           std::int64_t cpu_ns, std::int64_t span_ns = kS) {
    schema::ProcessSampleRow r{.sample_id = i + 1, .process_id = id};
    r.state = state;
    r.wchan = std::move(wchan);
    r.cpu_ns = cpu_ns;
    r.run_delay_ns = 0;
    r.span_ns = span_ns;
    b_.process_samples.push_back(r);
  }
  // The driver at 100 ms of CPU a second, and each backend at `cpu_ms`
  // except where a test sets its rows.
  void busy(std::int64_t id, std::int64_t cpu_ms, int from = 1, int to = 10) {
    for (int i = from; i <= to; ++i) row(id, i, 'S', std::nullopt, cpu_ms * kMs);
  }
  void ash_cpu(int pid, int from_poll, int polls) {
    for (int k = from_poll; k < from_poll + polls; ++k) {
      b_.pg_activity.push_back({.time_ns = kT0 + k * 100 * kMs,
                                .ash_tick = k + 1,
                                .pid = pid,
                                .backend_type = "client backend",
                                .state = "active"});
    }
  }
  // Drops the ASH polls k in [from, to).
  void drop_polls(int from, int to) {
    std::erase_if(b_.ash_ticks, [&](const schema::AshTickRow& t) {
      return t.ash_tick - 1 >= from && t.ash_tick - 1 < to;
    });
  }
  schema::Batch& batch() { return b_; }
  schema::Store& store() { return store_; }

  Report explain(ExplainOptions opt = {}) {
    store_.write(b_);
    b_ = {};
    return correlate::explain(store_, opt);
  }

 private:
  schema::Store store_;
  schema::Batch b_;
};

inline const Finding* finding(const Report& r, const std::string& kind) {
  auto it = std::find_if(r.findings.begin(), r.findings.end(),
                         [&](const Finding& f) { return to_string(f.kind) == kind; });
  return it == r.findings.end() ? nullptr : &*it;
}

inline std::int64_t part_ns(const Accounting& a, const std::string& name) {
  for (const auto& p : a.parts) {
    if (p.name == name) return p.time_ns;
  }
  return -1;
}

template <typename T>
T evidence(const Finding& f, const std::string& name) {
  for (const auto& [k, v] : f.evidence) {
    if (k == name) return std::get<T>(v);
  }
  ADD_FAILURE() << "no evidence " << name << " in " << to_string(f.kind);
  return T{};
}

}  // namespace stallscope::correlate::test_run
