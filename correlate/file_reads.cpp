// explain's read layer (file_reads.h).
#include "correlate/file_reads.h"

#include <memory>

#include <fmt/format.h>

#include "common/error.h"
#include "schema/attribution_readers.h"
#include "schema/lock_readers.h"
#include "schema/pgbench_readers.h"
#include "schema/run_reader.h"
#include "schema/sample_readers.h"

namespace stallscope::correlate::detail {

RunRow read_run_row(schema::Store& store) {
  auto row = schema::read_run(store);
  if (!row) throw_usage(fmt::format("cannot explain {}: it holds no run", store.path()));
  return run_row(std::move(*row));
}

QueryReads query_reads(schema::Store& store, const RunSummary& run) {
  const auto cut_ns =
      query_scan_cut_ns(run, [&store] { return schema::latest_query_per_client(store); });
  // lag_ns is read only when the first query has one (-R runs give every
  // query a lag; a column read costs about 20 % of the scan).
  return {
      .path = store.path(),
      .cut_ns = cut_ns,
      .skipped = schema::skipped_queries(store, cut_ns),
      .queries = rows_owned<schema::QueryTiming>(
          std::make_shared<schema::QueryRows>(store, cut_ns, schema::first_query_has_lag(store))),
      .error_keys =
          rows_owned<schema::QueryKey>(std::make_shared<schema::QueryErrorKeys>(store, cut_ns)),
      .sleeps =
          rows_owned<schema::QuerySleep>(std::make_shared<schema::QuerySleeps>(store, cut_ns)),
      .loss_keys = rows_owned<schema::ConnectionLossKey>(
          std::make_shared<schema::ConnectionLossKeys>(store, cut_ns)),
      .unfinished = schema::unfinished_queries(store, cut_ns),
      .queries_after =
          [&store](std::int64_t after_ns) { return schema::queries_after(store, after_ns); },
      .query_rows = [&store] { return schema::query_rows(store); },
  };
}

RunFactsInputs run_facts_inputs(schema::Store& store) {
  return {
      .aggregate = schema::pgbench_aggregate_totals(store),
      .sample_ticks = schema::sample_ticks(store),
      .ash_ticks = schema::ash_ticks(store),
      .has_ash_rows = schema::has_ash_rows(store),
      .median_sample_interval_ns = schema::median_sample_interval_ns(store),
      .sample_gaps = [&store](std::int64_t min_ns) { return schema::sample_gaps(store, min_ns); },
      .kept_until_ns = [&store] { return schema::kept_until_ns(store); },
  };
}

ProcessLookups process_lookups(schema::Store& store) {
  auto processes = std::make_shared<schema::ProcessLookup>(store);
  return {
      .find_driver_process =
          [&store](int pid, std::optional<std::int64_t> start_ticks, std::int64_t started_by_ns) {
            return schema::find_driver_process(store, pid, start_ticks, started_by_ns);
          },
      .driver_backends = [&store] { return schema::driver_backends(store); },
      .latest_with_pid =
          [processes](int pid, std::optional<std::int64_t> started_by_ns) {
            return processes->latest_with_pid(pid, started_by_ns);
          },
      .sampled_processes_named =
          [&store](const std::string& comm, std::int64_t from_ns, std::int64_t to_ns) {
            return schema::sampled_processes_named(store, comm, from_ns, to_ns);
          },
      .pooled_client_backends =
          [&store](std::int64_t from_ns, std::int64_t to_ns) {
            return schema::pooled_client_backends(store, from_ns, to_ns);
          },
      .sampled_processes_with_cpu =
          [&store](const std::string& comm, std::int64_t from_ns, std::int64_t to_ns) {
            return schema::sampled_processes_with_cpu(store, comm, from_ns, to_ns);
          },
      .ash_pids_with_application_name =
          [&store](const std::string& name, std::int64_t from_ns, std::int64_t to_ns) {
            return schema::ash_pids_with_application_name(store, name, from_ns, to_ns);
          },
      .ash_pids_without_application_name =
          [&store](const std::string& name, std::int64_t from_ns, std::int64_t to_ns) {
            return schema::ash_pids_without_application_name(store, name, from_ns, to_ns);
          },
      .process_identity = [&store](std::int64_t id) { return schema::process_identity(store, id); },
      .postgres_processes_started_between =
          [&store](std::int64_t from_ns, std::int64_t to_ns) {
            return schema::postgres_processes_started_between(store, from_ns, to_ns);
          },
      .run_command_line = [&store] { return schema::run_command_line(store); },
      .has_ash_rows = [&store] { return schema::has_ash_rows(store); },
  };
}

CgroupInputs cgroup_inputs(schema::Store& store, Span span) {
  auto sums = std::make_shared<schema::CgroupSums>(store);
  return {schema::process_cgroups(store), [sums, span](const std::string& cgroup) {
            return sums->of(cgroup, span.start_ns, span.end_ns);
          }};
}

ProcessReads process_reads(schema::Store& store) {
  auto names = std::make_shared<schema::ProcessLookup>(store);
  return {
      .sample_times =
          rows_owned<schema::SampleTime>(std::make_shared<schema::SampleTimeRows>(store)),
      .max_process_id = schema::max_process_id(store),
      .pid_of = [names](std::int64_t id) { return names->pid_of(id); },
      .name_of = [names](std::int64_t id) { return names->name_of(id); },
      .has_driver_thread_cpu =
          [&store](std::int64_t id) { return schema::has_driver_thread_cpu(store, id); },
      .process_rows =
          [&store](std::int64_t from_sample_id) {
            return rows_owned<schema::ProcessTick>(
                std::make_shared<schema::ProcessRows>(store, from_sample_id));
          },
      .driver_thread_rows =
          [&store](std::int64_t process_id, std::int64_t from_sample_id) {
            return rows_owned<schema::DriverThreadRow>(
                std::make_shared<schema::DriverThreadRows>(store, process_id, from_sample_id));
          },
  };
}

ConnectionErrorLookups connection_error_lookups(schema::Store& store) {
  auto errors = std::make_shared<schema::ConnectionErrors>(store);
  auto losses = std::make_shared<schema::ConnectionLosses>(store);
  return {[errors](std::int64_t from_ns, std::int64_t to_ns) {
            return errors->between(from_ns, to_ns);
          },
          [losses](std::int64_t from_ns, std::int64_t to_ns) {
            return losses->overlapping(from_ns, to_ns);
          }};
}

Lookup<std::optional<schema::LatestActivity>, int, std::int64_t> latest_activity(
    schema::Store& store) {
  auto activity = std::make_shared<schema::ActivityLookup>(store);
  return [activity](int pid, std::int64_t at_ns) { return activity->latest(pid, at_ns); };
}

LockChainLookups lock_chain_lookups(schema::Store& store) {
  return {[&store](std::int64_t from_ns, std::int64_t to_ns) {
            return schema::read_lock_polls(store, from_ns, to_ns);
          },
          latest_activity(store)};
}

SessionReads session_reads(schema::Store& store) {
  return {
      .has_sessions = [&store] { return schema::has_sessions(store); },
      .ash_tick_span =
          [&store](std::int64_t from_ns, std::int64_t to_ns) {
            return schema::ash_tick_span(store, from_ns, to_ns);
          },
      .sessions = [&store] { return schema::read_sessions(store); },
      .session_busy_polls =
          [&store](std::int64_t from_ns, std::int64_t to_ns) {
            return schema::session_busy_polls(store, from_ns, to_ns);
          },
      .session_idle_polls =
          [&store](const schema::AshTickSpan& ticks) {
            return schema::session_idle_polls(store, ticks);
          },
      .process_identities = [&store] { return schema::read_process_identities(store); },
      .record_clients = [&store] { return schema::read_record_clients(store); },
      .process_cpu =
          [&store](std::int64_t process_id, std::int64_t from_ns, std::int64_t to_ns) {
            return schema::process_cpu(store, process_id, from_ns, to_ns);
          },
      .process_sleeps =
          [&store](std::int64_t process_id, std::int64_t from_ns, std::int64_t to_ns) {
            return schema::process_sleeps(store, process_id, from_ns, to_ns);
          },
  };
}

}  // namespace stallscope::correlate::detail
