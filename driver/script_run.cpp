// Worker running scripts (driver/worker.h; the scripts themselves are parsed
// in driver/script.cpp): choose a script by weight, run its \set and \sleep
// commands, bind variables into its SQL commands and send them one by one,
// and -r's per-statement latencies.
#include <libpq-fe.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "driver/connection.h"
#include "driver/worker.h"

namespace stallscope::driver::detail {

void Worker::start_script(Client& c) {
  pick_script(c);
  c.command = 0;
  c.sent_sql = false;
  c.statement_rows.clear();
  c.state = ClientState::busy;
  step_script(c);
}

// Chooses the next transaction's script by weight; sets up the variables.
void Worker::pick_script(Client& c) {
  if (options_.scripts.size() == 1) {
    c.script = 0;
  } else {
    std::int64_t total = 0;
    for (const auto& s : options_.scripts) total += s.weight;
    std::int64_t pick = std::uniform_int_distribution<std::int64_t>(0, total - 1)(rng_);
    for (c.script = 0; c.script + 1 < options_.scripts.size(); ++c.script) {
      pick -= options_.scripts[c.script].weight;
      if (pick < 0) break;
    }
  }
  if (c.values.empty()) {
    c.values.resize(options_.variables.names.size());
    if (auto scale = options_.variables.find("scale"))
      c.values[*scale] = options_.scale.value_or(1);
    for (const auto& [name, value] : options_.defines) {
      if (auto slot = options_.variables.find(name)) c.values[*slot] = value;
    }
  }
}

// Runs the script's commands from c.command: \set at once, \sleep by
// waiting, SQL by sending it (the next step follows its results). At the end
// of the script the transaction is done.
void Worker::step_script(Client& c) {
  const Script& script = options_.scripts[c.script];
  while (c.command < script.commands.size()) {
    const ScriptCommand& cmd = script.commands[c.command];
    if (cmd.kind == ScriptCommand::Kind::set || cmd.kind == ScriptCommand::Kind::sleep) {
      std::int64_t v = 0;
      std::int64_t sleep_length_ns = 0;
      try {
        v = evaluate(*cmd.expr, c.values, rng_);
        if (cmd.kind == ScriptCommand::Kind::sleep) sleep_length_ns = sleep_ns(v, cmd.unit_ns);
      } catch (const Error& e) {
        script_failed(c, fmt::format("{}:{}: {}", script.name, cmd.line, e.what()));
        return;
      }
      ++c.command;
      if (cmd.kind == ScriptCommand::Kind::set) {
        c.values[static_cast<std::size_t>(cmd.target)] = v;
        continue;
      }
      c.sleep_started_mono_ns = mono_now_ns();
      c.sleep_until_mono_ns = c.sleep_started_mono_ns + sleep_length_ns;
      c.state = ClientState::sleeping;
      return;
    }
    if (auto error = bind_command(c, script, cmd)) {
      script_failed(c, *error);
      return;
    }
    if (options_.per_statement) c.statement_sent_mono_ns = mono_now_ns();
    if (send_command(c, cmd, c.script, c.command)) {
      c.sent_sql = true;
      c.state = ClientState::busy;
      return;
    }
    send_failed(c);
    return;
  }
  end_script_transaction(c);
}

// The script's transaction is over (done, or failed by the script): record
// it and go on to the next — from the event loop when it sent no SQL
// (ClientState::ready), else at once.
void Worker::end_script_transaction(Client& c) {
  std::int64_t now = mono_now_ns();
  record(c, now);
  c.state = ClientState::idle;
  if (options_.connect_per_transaction) close_connection(c);
  if (!c.sent_sql) {
    c.state = ClientState::ready;
    return;
  }
  send_next(c, now);
}

// Returns the message of a transaction that cannot go on, else nullopt.
std::optional<std::string> Worker::bind_command(Client& c, const Script& script,
                                                const ScriptCommand& cmd) {
  c.param_text.clear();
  for (int var : cmd.vars) {
    const auto& v = c.values[static_cast<std::size_t>(var)];
    if (!v) {
      return fmt::format("{}:{}: variable '{}' is not set", script.name, cmd.line,
                         options_.variables.names[static_cast<std::size_t>(var)]);
    }
    c.param_text.push_back(std::to_string(*v));
  }
  if (options_.protocol == Protocol::simple) {
    c.query_text.clear();
    for (std::size_t k = 0; k < cmd.text.size(); ++k) {
      c.query_text += cmd.text[k];
      if (k < c.param_text.size()) c.query_text += c.param_text[k];
    }
  } else {
    c.param_ptrs.clear();
    for (const auto& p : c.param_text) c.param_ptrs.push_back(p.c_str());
  }
  return std::nullopt;
}

// Sends SQL command `command` of script `script`, bound by bind_command.
int Worker::send_command(Client& c, const ScriptCommand& cmd, std::size_t script,
                         std::size_t command) {
  PGconn* conn = c.conn.get();
  if (options_.protocol == Protocol::simple) return PQsendQuery(conn, c.query_text.c_str());
  int n = static_cast<int>(c.param_ptrs.size());
  if (options_.protocol == Protocol::extended) {
    return PQsendQueryParams(conn, cmd.numbered.c_str(), n, nullptr, c.param_ptrs.data(), nullptr,
                             nullptr, 0);
  }
  return PQsendQueryPrepared(conn, script_statement(script, command).c_str(), n,
                             c.param_ptrs.data(), nullptr, nullptr, 0);
}

// -r: the SQL command c.command of the running script got its last result.
void Worker::statement_done(Client& c, std::int64_t now_ns) {
  int id = statement_ids_[c.script][c.command];
  if (id < 0) return;
  std::int64_t latency_ns = now_ns - c.statement_sent_mono_ns;
  c.statement_rows.push_back(schema::StatementLatencyRow{
      .start_ns = c.sent_wall_ns,
      .client_id = c.client_id,
      .seq = c.next_seq,
      .statement = id,
      .latency_ns = latency_ns,
  });
}

// A script that cannot go on (an expression error): the transaction fails
// with XX000 and the message naming the script line; the next one starts.
void Worker::script_failed(Client& c, const std::string& message) {
  c.failed = true;
  c.sqlstate = kInternalError;
  c.error = message;
  end_script_transaction(c);
}

}  // namespace stallscope::driver::detail
