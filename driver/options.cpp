#include "driver/options.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"

namespace stallscope::driver {
namespace detail {
namespace {

// --pipeline: in range, and only with what pipeline mode can run.
void check_pipeline(const DriverOptions& o) {
  if (o.pipeline < 0 || o.pipeline > kMaxPipeline) {
    throw_usage(fmt::format("cannot start the driver: --pipeline must be 1..{}, not {}",
                            kMaxPipeline, o.pipeline));
  }
  if (o.pipeline > 0) {
    if (o.connect_per_transaction || o.rate_tps) {
      throw_usage("cannot start the driver: --pipeline does not go with -C or -R");
    }
    if (o.per_statement) throw_usage("cannot start the driver: --pipeline does not go with -r");
    for (const auto& s : o.scripts) {
      const bool other =
          std::any_of(s.commands.begin(), s.commands.end(), [](const ScriptCommand& c) {
            return c.kind != ScriptCommand::Kind::sql && c.kind != ScriptCommand::Kind::set;
          });
      const bool stores =
          std::any_of(s.commands.begin(), s.commands.end(),
                      [](const ScriptCommand& c) { return c.store != ScriptCommand::Store::none; });
      if (other || stores || s.sql_commands() != 1) {
        throw_usage(fmt::format(
            "cannot use --pipeline with script {}: it needs exactly one SQL command, and no "
            "meta-command but \\set",
            s.name));
      }
    }
    if (o.scripts.empty() && o.protocol == Protocol::simple &&
        o.sql.find(';') < o.sql.find_last_not_of(" \t\r\n;")) {
      throw_usage("cannot use --pipeline with several statements in one --sql string");
    }
  }
}

}  // namespace

void check_options(const DriverOptions& o) {
  if (o.clients < 1) {
    throw_usage(fmt::format("cannot start the driver: -c must be at least 1, not {}", o.clients));
  }
  if (o.threads < 1) {
    throw_usage(fmt::format("cannot start the driver: -j must be at least 1, not {}", o.threads));
  }
  if (o.duration_s.has_value() == o.queries_per_client.has_value()) {
    throw_usage("cannot start the driver: give exactly one of -T (seconds) and -t (transactions)");
  }
  if (o.duration_s && !(std::isfinite(*o.duration_s) && *o.duration_s > 0)) {
    throw_usage(fmt::format("cannot start the driver: -T must be positive, not {}", *o.duration_s));
  }
  if (o.queries_per_client && *o.queries_per_client < 1) {
    throw_usage(fmt::format("cannot start the driver: -t must be at least 1, not {}",
                            *o.queries_per_client));
  }
  if (o.scripts.empty() && o.sql.find_first_not_of(" \t\r\n;") == std::string::npos) {
    throw_usage("cannot run the SQL: it is empty (give --sql or -f)");
  }
  if (o.rate_tps && !(std::isfinite(*o.rate_tps) && *o.rate_tps > 0)) {
    throw_usage(fmt::format("cannot start the driver: -R must be positive, not {}", *o.rate_tps));
  }
  if (o.latency_limit_ms && !(std::isfinite(*o.latency_limit_ms) && *o.latency_limit_ms > 0)) {
    throw_usage(
        fmt::format("cannot start the driver: -L must be positive, not {}", *o.latency_limit_ms));
  }
  if (o.skip_late && !(o.rate_tps && o.latency_limit_ms)) {
    throw_usage("cannot start the driver: --skip-late needs both -R and -L");
  }
  check_pipeline(o);
  if (o.max_tries < 0) {
    throw_usage(
        fmt::format("cannot start the driver: --max-tries must be ≥ 0, not {}", o.max_tries));
  }
  if (o.max_tries == 0 && !o.duration_s && !o.latency_limit_ms) {
    throw_usage(
        "cannot start the driver: an unlimited number of transaction tries (--max-tries 0) can "
        "only be used with a duration (-T) or a latency limit (-L)");
  }
  if (o.max_tries != 1 && (o.connect_per_transaction || o.pipeline > 0 || o.scripts.empty())) {
    throw_usage(
        "cannot start the driver: --max-tries needs scripts, and does not go with -C or "
        "--pipeline");
  }
  for (const auto& s : o.scripts) {
    if (o.protocol == Protocol::simple && s.has(ScriptCommand::Kind::start_pipeline)) {
      throw_usage(
          fmt::format("cannot run script {}: cannot use pipeline mode with the simple query "
                      "protocol (\\startpipeline "
                      "needs -M extended or -M prepared)",
                      s.name));
    }
    // pgbench's limit on the parameters of one statement.
    constexpr std::size_t kMaxParams = 255;
    for (const auto& c : s.commands) {
      if (o.protocol != Protocol::simple && c.params.size() > kMaxParams) {
        throw_usage(fmt::format(
            "cannot parse {}:{}: statement has too many arguments (maximum is {}): {} under -M {}",
            s.name, c.line, kMaxParams, c.params.size(), protocol_name(o.protocol)));
      }
    }
  }
  if (o.per_statement && o.scripts.empty()) {
    throw_usage("cannot start the driver: -r needs scripts (internal: run_command makes one)");
  }
}

}  // namespace detail

Protocol parse_protocol(const std::string& name) {
  if (name == "simple") return Protocol::simple;
  if (name == "extended") return Protocol::extended;
  if (name == "prepared") return Protocol::prepared;
  throw_usage(fmt::format(
      "cannot use query protocol '{}': expected simple, extended or prepared (-M)", name));
}

const char* protocol_name(Protocol p) {
  switch (p) {
    case Protocol::simple:
      return "simple";
    case Protocol::extended:
      return "extended";
    case Protocol::prepared:
      return "prepared";
  }
  return "unknown";
}

}  // namespace stallscope::driver
