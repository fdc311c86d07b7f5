// The names of finding kinds, stall causes and attribution methods, as the
// JSON, the text and the run file's finding and stall tables show them.
#include "correlate/correlate.h"

namespace stallscope::correlate {

std::string_view to_string(FindingKind kind) {
  switch (kind) {
    case FindingKind::client_cpu:
      return "client_cpu";
    case FindingKind::server_cpu:
      return "server_cpu";
    case FindingKind::single_thread:
      return "single_thread";
    case FindingKind::runqueue:
      return "runqueue";
    case FindingKind::steal:
      return "steal";
    case FindingKind::cpu_throttle:
      return "cpu_throttle";
    case FindingKind::io_wait:
      return "io_wait";
    case FindingKind::lock_wait:
      return "lock_wait";
    case FindingKind::lwlock_wait:
      return "lwlock_wait";
    case FindingKind::memory_pressure:
      return "memory_pressure";
    case FindingKind::kernel_wait:
      return "kernel_wait";
    case FindingKind::connection_setup:
      return "connection_setup";
    case FindingKind::network_roundtrip:
      return "network_roundtrip";
    case FindingKind::pool_wait:
      return "pool_wait";
    case FindingKind::network_stack:
      return "network_stack";
    case FindingKind::replication_wait:
      return "replication_wait";
    case FindingKind::connection_lost:
      return "connection_lost";
    case FindingKind::latency_bound:
      return "latency_bound";
    case FindingKind::errors:
      return "errors";
    case FindingKind::driver_stopped:
      return "driver_stopped";
  }
  return "?";
}

std::string_view to_string(StallCause cause) {
  switch (cause) {
    case StallCause::io_wait:
      return "io_wait";
    case StallCause::checkpoint:
      return "checkpoint";
    case StallCause::lock_wait:
      return "lock_wait";
    case StallCause::lwlock_wait:
      return "lwlock_wait";
    case StallCause::cpu_throttle:
      return "cpu_throttle";
    case StallCause::runqueue:
      return "runqueue";
    case StallCause::steal:
      return "steal";
    case StallCause::connection_lost:
      return "connection_lost";
    case StallCause::kernel_wait:
      return "kernel_wait";
    case StallCause::unexplained:
      return "unexplained";
    case StallCause::replication_wait:
      return "replication_wait";
  }
  return "?";
}

std::string_view to_string(AttributionMethod method) {
  switch (method) {
    case AttributionMethod::per_query:
      return "per_query";
    case AttributionMethod::host_wide:
      return "host_wide";
  }
  return "?";
}

}  // namespace stallscope::correlate
