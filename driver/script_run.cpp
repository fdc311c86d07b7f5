// Worker running scripts (driver/worker.h; the scripts themselves are parsed
// in driver/script.cpp): choose a script by weight, run its meta-commands
// (\set, \sleep, \setshell, \shell, \if, pipelines), bind variables into its
// SQL commands and send them one by one, \gset/\aset their results, and
// -r's per-statement latencies.
#include <libpq-fe.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/parse.h"
#include "driver/connection.h"
#include "driver/worker.h"

namespace stallscope::driver::detail {

void Worker::start_script(Client& c) {
  pick_script(c);
  c.tries = 1;
  c.retried_ns = 0;
  c.try_started_mono_ns = c.sent_mono_ns;
  if (options_.max_tries != 1) c.rng_at_start = c.rng;
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
  if (c.values.empty()) init_variables(c);
}

// A client's variables before its first script: pgbench's automatic ones
// (:scale, :client_id, :random_seed, :default_seed), then -D's.
void Worker::init_variables(Client& c) {
  const Variables& names = options_.variables;
  c.values.resize(std::max<std::size_t>(names.names.size(), 1));
  const auto set = [&](const char* name, std::int64_t v) {
    if (auto slot = names.find(name))
      c.values[static_cast<std::size_t>(*slot)].set(Value::integer(v));
  };
  Prng seeds(options_.random_seed);
  set("scale", options_.scale.value_or(1));
  set("client_id", c.client_id);
  set("random_seed", static_cast<std::int64_t>(options_.random_seed));
  set("default_seed", static_cast<std::int64_t>(seeds.next()));
  for (const auto& [name, value] : options_.defines) {
    if (auto slot = names.find(name)) c.values[static_cast<std::size_t>(*slot)].set_text(value);
  }
  // Each client's own sequence, reproducible from the seed and its number.
  c.rng.reseed(options_.random_seed ^
               (0x9E3779B97F4A7C15ULL * (static_cast<std::uint64_t>(c.client_id) + 1)));
}

namespace {

// A client's command line for \setshell and \shell: the words joined by
// spaces, `:name` replaced by its value, `::word` written as `:word`.
std::string shell_command(const ScriptCommand& cmd, const VariableValues& values) {
  std::string line;
  for (std::size_t k = 0; k < cmd.words.size(); ++k) {
    if (k > 0) line += ' ';
    const std::string& w = cmd.words[k];
    if (cmd.word_vars[k] >= 0) {
      const Variable& v = values[static_cast<std::size_t>(cmd.word_vars[k])];
      if (!v.is_set()) throw_usage(fmt::format("undefined variable \"{}\"", w));
      line += v.state == Variable::State::text ? v.text : value_text(v.value);
    } else {
      line += w.starts_with("::") ? w.substr(1) : w;
    }
  }
  return line;
}

struct PcloseDeleter {
  void operator()(std::FILE* f) const { pclose(f); }
};

// \setshell: the integer the command prints on its first line.
std::int64_t run_setshell(const std::string& command) {
  std::unique_ptr<std::FILE, PcloseDeleter> pipe(popen(command.c_str(), "r"));
  if (!pipe) throw_usage("setshell: could not launch shell command");
  std::array<char, 64> line{};
  if (!std::fgets(line.data(), static_cast<int>(line.size()), pipe.get())) {
    throw_usage("setshell: could not read result of shell command");
  }
  // An integer, with white space around it, as pgbench's strtol reads it.
  const std::string out(line.data());
  std::string_view number(out);
  while (!number.empty() && std::isspace(static_cast<unsigned char>(number.back()))) {
    number.remove_suffix(1);
  }
  while (!number.empty() && std::isspace(static_cast<unsigned char>(number.front()))) {
    number.remove_prefix(1);
  }
  if (number.starts_with('+')) number.remove_prefix(1);
  const auto v = common::parse_int64(number);
  if (!v) {
    throw_usage(fmt::format("setshell: shell command must return an integer (not \"{}\")", out));
  }
  return *v;
}

}  // namespace

// Runs the script's commands from c.command: meta-commands at once, \sleep
// by waiting, SQL by sending it (the next step follows its results, or at
// once inside a pipeline). At the end of the script the transaction is done.
void Worker::step_script(Client& c) {
  using K = ScriptCommand::Kind;
  const Script& script = options_.scripts[c.script];
  while (c.command < script.commands.size()) {
    const ScriptCommand& cmd = script.commands[c.command];
    const EvalContext context{c.values, options_.variables, c.rng, static_cast<int>(c.script),
                              static_cast<int>(c.command)};
    try {
      switch (cmd.kind) {
        case K::sql:
          if (!send_script_sql(c, cmd)) return;
          continue;  // in a pipeline: on to the next command at once
        case K::set:
          c.values[static_cast<std::size_t>(cmd.target)].set(evaluate(*cmd.expr, context));
          ++c.command;
          continue;
        case K::sleep: {
          const std::int64_t length_ns = sleep_ns(sleep_count(c, cmd), cmd.unit_ns);
          ++c.command;
          c.sleep_started_mono_ns = mono_now_ns();
          c.sleep_until_mono_ns = c.sleep_started_mono_ns + length_ns;
          c.state = ClientState::sleeping;
          return;
        }
        case K::setshell:
          c.values[static_cast<std::size_t>(cmd.target)].set(
              Value::integer(run_setshell(shell_command(cmd, c.values))));
          ++c.command;
          continue;
        case K::shell:
          if (std::system(shell_command(cmd, c.values).c_str()) != 0) {
            throw_usage("shell: could not launch shell command (or it failed)");
          }
          ++c.command;
          continue;
        case K::if_:
          c.command = truth(evaluate(*cmd.expr, context))
                          ? c.command + 1
                          : enter_branch(c, script, cmd.next_branch);
          continue;
        case K::elif:
        case K::else_:  // the end of a branch that ran
          c.command = cmd.endif + 1;
          continue;
        case K::endif:
          ++c.command;
          continue;
        case K::start_pipeline:
          if (c.in_script_pipeline) throw_usage("already in pipeline mode");
          if (options_.protocol == Protocol::prepared) {
            // Prepared before the pipeline, as pgbench does: its commands
            // up to the next \endpipeline.
            for (std::size_t k = c.command + 1;
                 k < script.commands.size() && script.commands[k].kind != K::end_pipeline; ++k) {
              if (script.commands[k].kind == K::sql) prepare_command(c, c.script, k);
            }
          }
          if (!PQenterPipelineMode(c.conn.get())) throw_usage("cannot enter pipeline mode");
          c.in_script_pipeline = true;
          c.pipeline_syncs = 0;
          ++c.command;
          continue;
        case K::sync_pipeline:
        case K::end_pipeline:
          if (!c.in_script_pipeline) throw_usage("not in pipeline mode");
          if (!PQpipelineSync(c.conn.get())) {
            send_failed(c);
            return;
          }
          ++c.pipeline_syncs;
          if (cmd.kind == K::sync_pipeline) {
            ++c.command;
            continue;
          }
          c.state = ClientState::busy;
          return;  // pipeline_results() takes the results up to the last sync
      }
    } catch (const Error& e) {
      script_failed(c, fmt::format("{}:{}: {}", script.name, cmd.line, e.what()),
                    e.sqlstate().empty() ? std::nullopt : std::optional(e.sqlstate()));
      return;
    }
  }
  if (c.in_script_pipeline) {
    script_failed(c, fmt::format("{}: end of script reached with pipeline open", script.name));
    return;
  }
  end_script_transaction(c);
}

// The command to run after a false \if or \elif whose next branch is
// `index`: the first \elif whose condition holds, an \else, or the \endif.
std::size_t Worker::enter_branch(Client& c, const Script& script, std::size_t index) {
  for (;;) {
    const ScriptCommand& cmd = script.commands[index];
    if (cmd.kind != ScriptCommand::Kind::elif) return index + 1;
    const EvalContext context{c.values, options_.variables, c.rng, static_cast<int>(c.script),
                              static_cast<int>(index)};
    if (truth(evaluate(*cmd.expr, context))) return index + 1;
    index = cmd.next_branch;
  }
}

// \sleep's count: its constant, or its variable's value read as C's atoi
// reads it (as pgbench).
std::int64_t Worker::sleep_count(const Client& c, const ScriptCommand& cmd) const {
  if (cmd.sleep_var < 0) return cmd.sleep_count;
  const Variable& v = c.values[static_cast<std::size_t>(cmd.sleep_var)];
  const std::string& name = options_.variables.names[static_cast<std::size_t>(cmd.sleep_var)];
  if (!v.is_set()) throw_usage(fmt::format("sleep: undefined variable \"{}\"", name));
  const std::string text = v.state == Variable::State::text ? v.text : value_text(v.value);
  const auto n = common::parse_leading_integer(text);
  if (!n) {
    throw_usage(fmt::format("sleep: invalid sleep time \"{}\" for variable \"{}\"", text, name));
  }
  return *n;
}

// Sends SQL command `cmd`; false when the client now waits (for its
// results, or after a failure), true inside a pipeline (go on at once).
bool Worker::send_script_sql(Client& c, const ScriptCommand& cmd) {
  if (c.in_script_pipeline && cmd.store != ScriptCommand::Store::none) {
    throw_usage(fmt::format("{} is not allowed in pipeline mode",
                            cmd.store == ScriptCommand::Store::gset ? "\\gset" : "\\aset"));
  }
  bind_command(c, cmd);
  if (options_.protocol == Protocol::prepared && !c.in_script_pipeline) {
    prepare_command(c, c.script, c.command);
  }
  if (options_.per_statement && !c.in_script_pipeline) c.statement_sent_mono_ns = mono_now_ns();
  c.storing = cmd.store;
  c.gset_rows = 0;
  if (!send_command(c, cmd, c.script, c.command)) {
    send_failed(c);
    return false;
  }
  c.sent_sql = true;
  c.state = ClientState::busy;
  if (!c.in_script_pipeline) return false;
  ++c.command;
  return true;
}

void Worker::prepare_command(Client& c, std::size_t script, std::size_t command) {
  if (c.prepared_connection != c.connection) {
    c.prepared.assign(statement_names_.size(), 0);
    c.prepared_connection = c.connection;
  }
  const int id = statement_ids_[script][command];
  if (id < 0 || c.prepared[static_cast<std::size_t>(id)]) return;
  prepare(c.conn.get(), statement_names_[static_cast<std::size_t>(id)].c_str(),
          options_.scripts[script].commands[command].numbered, options_.protocol);
  c.prepared[static_cast<std::size_t>(id)] = 1;
}

// The script's transaction is over (done, or failed by the script): record
// it and go on to the next — from the event loop when it sent no SQL
// (ClientState::ready), else at once.
void Worker::end_script_transaction(Client& c) {
  std::int64_t now = mono_now_ns();
  check_transaction_closed(c);
  record(c, now);
  c.state = ClientState::idle;
  if (options_.connect_per_transaction) close_connection(c);
  if (!c.sent_sql) {
    c.state = ClientState::ready;
    return;
  }
  if (c.conn && PQtransactionStatus(c.conn.get()) != PQTRANS_IDLE) c.needs_rollback = true;
  send_next(c, now);
}

// pgbench refuses a script that ends inside a transaction block: the
// transaction fails, and a ROLLBACK ends the block before the next one.
void Worker::check_transaction_closed(Client& c) {
  if (c.failed || !c.sent_sql || !c.conn) return;
  if (PQtransactionStatus(c.conn.get()) == PQTRANS_INTRANS) {
    c.failed = true;
    c.sqlstate = kInternalError;
    c.error = fmt::format("{}: end of script reached without completing the last transaction",
                          options_.scripts[c.script].name);
  }
}

namespace {

// A variable's value as SQL text (pgbench's getVariable).
void append_value(std::string& out, const Variable& v) {
  if (v.state == Variable::State::text) {
    out += v.text;
  } else if (v.value.type == Value::Type::integer) {
    std::array<char, 24> buf{};
    const auto [end, ec] =
        std::to_chars(buf.data(), buf.data() + buf.size(), v.value.integer_value);
    out.append(buf.data(), end);
  } else {
    out += value_text(v.value);
  }
}

}  // namespace

void Worker::bind_command(Client& c, const ScriptCommand& cmd) {
  if (options_.protocol == Protocol::simple) {
    // Every reference, quoted or not, as pgbench; an unset one stays as written.
    c.query_text.clear();
    for (std::size_t k = 0; k < cmd.text.size(); ++k) {
      c.query_text += cmd.text[k];
      if (k >= cmd.vars.size()) break;
      const auto slot = static_cast<std::size_t>(cmd.vars[k]);
      const Variable& v = c.values[slot];
      if (v.is_set()) {
        append_value(c.query_text, v);
      } else {
        c.query_text += ':';
        c.query_text += options_.variables.names[slot];
      }
    }
    return;
  }
  // $n parameters; an unset variable is NULL, as pgbench's.
  const std::size_t n = cmd.params.size();
  if (c.param_text.size() < n) c.param_text.resize(n);
  c.param_ptrs.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    const Variable& v = c.values[static_cast<std::size_t>(cmd.params[k])];
    if (!v.is_set()) {
      c.param_ptrs[k] = nullptr;
      continue;
    }
    c.param_text[k].clear();
    append_value(c.param_text[k], v);
    c.param_ptrs[k] = c.param_text[k].c_str();
  }
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
  const auto id = static_cast<std::size_t>(statement_ids_[script][command]);
  return PQsendQueryPrepared(conn, statement_names_[id].c_str(), n, c.param_ptrs.data(), nullptr,
                             nullptr, 0);
}

// \gset/\aset: a row set of the command in flight. \aset stores each
// result's last row at once; \gset keeps the result for the command's end
// (only the last result of a compound command counts, and it must be one row).
void Worker::store_result(Client& c, const pg_result* res) {
  const int rows = PQntuples(res);
  const int fields = PQnfields(res);
  if (c.storing == ScriptCommand::Store::aset) {
    if (rows <= 0) return;
    const std::string& prefix = options_.scripts[c.script].commands[c.command].store_prefix;
    for (int f = 0; f < fields; ++f)
      store_column(c, prefix + PQfname(res, f), PQgetvalue(res, rows - 1, f));
    return;
  }
  c.gset_rows = rows;
  c.gset_columns.clear();
  if (rows != 1) return;
  for (int f = 0; f < fields; ++f)
    c.gset_columns.emplace_back(PQfname(res, f), PQgetvalue(res, 0, f));
}

// The command's results are all in: \gset's values go into their variables
// (the transaction fails when its last result was not exactly one row).
void Worker::finish_store(Client& c) {
  const bool gset = c.storing == ScriptCommand::Store::gset;
  c.storing = ScriptCommand::Store::none;
  if (!gset || c.failed) return;
  const Script& script = options_.scripts[c.script];
  const ScriptCommand& cmd = script.commands[c.command];
  // A last result without rows (an UPDATE, an empty query) is 0 rows, as pgbench counts it.
  if (c.gset_rows != 1) {
    c.failed = true;
    c.sqlstate = kInternalError;
    c.error =
        fmt::format("{}:{}: \\gset expected one row, got {}", script.name, cmd.line, c.gset_rows);
    return;
  }
  for (const auto& [column, value] : c.gset_columns)
    store_column(c, cmd.store_prefix + column, value.c_str());
}

// One column of a \gset/\aset row into variable `name` (a name no script
// reads is not kept); a column whose name is no variable name ("?column?")
// fails the transaction, as pgbench's.
void Worker::store_column(Client& c, const std::string& name, const char* value) {
  if (auto slot = options_.variables.find(name)) {
    c.values[static_cast<std::size_t>(*slot)].set_text(value);
    return;
  }
  if (!valid_variable_name(name) && !c.failed) {
    const Script& script = options_.scripts[c.script];
    c.failed = true;
    c.sqlstate = kInternalError;
    c.error = fmt::format("{}:{}: {}: invalid variable name: \"{}\"", script.name,
                          script.commands[c.command].line,
                          c.storing == ScriptCommand::Store::aset ? "aset" : "gset", name);
  }
}

// \endpipeline: takes results until the last sync is answered, then leaves
// pipeline mode and goes on after \endpipeline (or ends the failed
// transaction). PQgetResult gives NULL between the commands' results.
void Worker::pipeline_results(Client& c) {
  PGconn* conn = c.conn.get();
  const bool lost = PQconsumeInput(conn) == 0 && PQstatus(conn) == CONNECTION_BAD;
  while (!lost && !PQisBusy(conn)) {
    pg::Result res(PQgetResult(conn));
    if (!res) continue;
    if (PQresultStatus(res.get()) == PGRES_PIPELINE_SYNC) {
      if (--c.pipeline_syncs > 0) continue;
      exit_pipeline(c);
      transaction_done(c, mono_now_ns());  // c.command is \endpipeline's
      return;
    }
    take_result(c, res.get());
  }
  if (lost) {
    c.in_script_pipeline = false;
    drain(c, true);
  }
}

bool Worker::should_retry(const Client& c, std::int64_t now_ns) const {
  if (options_.max_tries == 1 || !c.failed || !c.sqlstate) return false;
  if (*c.sqlstate != kSerializationFailure && *c.sqlstate != kDeadlockDetected) return false;
  if (options_.max_tries > 0 && c.tries >= options_.max_tries) return false;
  if (stopping_ || (deadline_mono_ns_ && now_ns >= *deadline_mono_ns_)) return false;
  if (options_.latency_limit_ms && static_cast<double>(now_ns - c.sent_mono_ns) >
                                       *options_.latency_limit_ms * common::kNsPerMsDouble) {
    return false;
  }
  return c.conn && PQstatus(c.conn.get()) != CONNECTION_BAD;
}

void Worker::begin_retry(Client& c, std::int64_t now_ns) {
  if (options_.verbose_errors) {
    const std::string tries = options_.max_tries > 0
                                  ? fmt::format("{}/{}", c.tries, options_.max_tries)
                                  : fmt::format("{}", c.tries);
    fmt::print(stderr, "client {} repeats the transaction after the error (try {}): {}\n",
               c.client_id, tries, c.error.value_or(""));
  }
  c.retrying = true;
  c.needs_rollback = PQtransactionStatus(c.conn.get()) != PQTRANS_IDLE;
  c.state = ClientState::idle;
  send_next(c, now_ns);
}

// The next try of the transaction whose try failed: from the script's
// start, with the random state the transaction started with.
void Worker::restart_try(Client& c, std::int64_t now_ns) {
  c.retrying = false;
  ++c.tries;
  c.retried_ns += now_ns - c.try_started_mono_ns;
  c.try_started_mono_ns = now_ns;
  c.failed = false;
  c.sqlstate.reset();
  c.error.reset();
  c.rows = 0;
  c.rng = c.rng_at_start;
  c.statement_rows.clear();  // -r: the statements of the last try
  c.command = 0;
  c.state = ClientState::busy;
  step_script(c);
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
void Worker::script_failed(Client& c, const std::string& message,
                           const std::optional<std::string>& sqlstate) {
  c.failed = true;
  c.sqlstate = sqlstate.value_or(kInternalError);
  c.error = message;
  if (c.in_script_pipeline && c.conn) {
    // Leave pipeline mode: one more sync, the results up to it (and to the
    // syncs already sent) discarded.
    PGconn* conn = c.conn.get();
    if (PQpipelineSync(conn)) {
      for (int syncs = c.pipeline_syncs + 1; syncs > 0;) {
        pg::Result res(PQgetResult(conn));
        if (res && PQresultStatus(res.get()) == PGRES_PIPELINE_SYNC) --syncs;
        if (!res && PQstatus(conn) == CONNECTION_BAD) break;
      }
    }
    exit_pipeline(c);
  }
  end_script_transaction(c);
}

// Out of pipeline mode once every sync is answered (libpq may still hold
// the NULL that follows the last one).
void Worker::exit_pipeline(Client& c) {
  PGconn* conn = c.conn.get();
  if (!PQexitPipelineMode(conn)) {
    pg::Result rest(PQgetResult(conn));
    PQexitPipelineMode(conn);
  }
  c.in_script_pipeline = false;
  c.pipeline_syncs = 0;
}

}  // namespace stallscope::driver::detail
