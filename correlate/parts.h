// The parts of a time accounting (docs/findings.md, "Time accounting"): one
// enum, the names the run file's JSON, explain --json and the report page
// give them, and their labels in text. A part's id is its name, or for the
// keyed families "name:key" ("server_wait:Lock", "kernel_wait:pipe_write",
// "path_cpu:pgbouncer").
#pragma once

#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

namespace stallscope::correlate {

enum class Part {
  // The query time (Accounting).
  driver_cpu,
  path_cpu,   // keyed by comm
  path_wait,  // keyed by the pooler
  server_cpu,
  server_wait,     // keyed by wait class
  server_d_state,  // keyed by wchan
  kernel_wait,     // keyed by wchan
  run_queue,
  client_run_queue,
  connection_lost,
  schedule_lag,
  driver_stopped,
  remainder,
  unaccounted,
  // An application's session time (record --pg, sessions.cpp).
  client_cpu,
  client_sleep,
  client_idle,
  client_blocked,  // keyed by wchan
  // The host's CPU time, when there is no query time (host_accounting.cpp).
  process_cpu,  // keyed by "comm (pid N)"
  other_cpu,
  iowait,
  steal,
  idle,
};

struct PartSpelling {
  Part part;
  std::string_view name;   // the id's family, as JSON gives it
  std::string_view label;  // in text; keyed: followed by " <key>"; empty: the id as it is
  bool keyed;
};

// Every part, in the enum's order.
inline constexpr PartSpelling kPartSpellings[] = {
    {Part::driver_cpu, "driver_cpu", "driver CPU", false},
    {Part::path_cpu, "path_cpu", "path CPU", true},
    {Part::path_wait, "path_wait", "path wait", true},
    {Part::server_cpu, "server_cpu", "server backend CPU", false},
    {Part::server_wait, "server_wait", "server wait", true},
    {Part::server_d_state, "server_d_state", "backend D state", true},
    {Part::kernel_wait, "kernel_wait", "backend asleep in", true},
    {Part::run_queue, "run_queue", "run-queue delay", false},
    {Part::client_run_queue, "client_run_queue", "driver run-queue delay", false},
    {Part::connection_lost, "connection_lost", "connection lost (reconnecting)", false},
    {Part::schedule_lag, "schedule_lag", "schedule lag", false},
    {Part::driver_stopped, "driver_stopped", "driver stopped (not running)", false},
    {Part::remainder, "remainder", "remainder (round trips)", false},
    {Part::unaccounted, "unaccounted", "unaccounted (not sampled)", false},
    {Part::client_cpu, "client_cpu", "client CPU", false},
    {Part::client_sleep, "client_sleep", "client think time (asleep)", false},
    {Part::client_idle, "client_idle", "client waiting for other input (not the database)", false},
    {Part::client_blocked, "client_blocked", "client blocked in", true},
    {Part::process_cpu, "process_cpu", "", true},
    {Part::other_cpu, "other_cpu", "", false},
    {Part::iowait, "iowait", "", false},
    {Part::steal, "steal", "", false},
    {Part::idle, "idle", "", false},
};

static_assert([] {
  for (std::size_t i = 0; i < std::size(kPartSpellings); ++i)
    if (static_cast<std::size_t>(kPartSpellings[i].part) != i) return false;
  return true;
}());

// The family's name: "server_wait".
std::string_view part_name(Part part);
// The id of `part` with `key` (keyed families): "server_wait:Lock".
std::string part_id(Part part, std::string_view key = {});
// The family of an id; nullopt for a name this build does not know.
std::optional<Part> part_of(std::string_view id);
// An id in words: "server_wait:Lock" → "server wait Lock", "remainder" →
// "remainder (round trips)"; an unknown id as it is.
std::string part_label(std::string_view id);

}  // namespace stallscope::correlate
