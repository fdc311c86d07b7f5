// One client of the driver: its connection and the state machine a driver
// thread (driver/worker.h) moves it through — between transactions,
// throttled, busy, rolling back, reconnecting, sleeping, done — with what the
// transaction in flight needs. Internal to driver/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/pg.h"
#include "driver/script.h"
#include "schema/records.h"

namespace stallscope::driver::detail {

enum class ClientState {
  idle,          // between transactions (only momentarily, or at the end)
  throttling,    // -R: waiting for the scheduled start of its next transaction
  busy,          // a transaction is in flight
  rolling_back,  // a ROLLBACK after a failed transaction left the session aborted
  resetting,     // PQresetStart/PQresetPoll in progress
  backoff,       // waiting before the next reset attempt (-C: the next connect)
  sleeping,      // script \sleep until sleep_until_mono_ns
  // The next transaction is due at once, after one that sent no SQL (only
  // \set and \sleep, or a script error before any SQL): it is started by
  // the event loop, not from inside the last one — a run of such
  // transactions neither recurses nor keeps other clients and the stop flag
  // waiting.
  ready,
  done,
};

struct Client {
  int client_id = 0;
  int thread = 0;
  pg::Conn conn;
  int connection = 0;              // number of the current connection (client rows)
  std::optional<int> backend_pid;  // of the current connection
  ClientState state = ClientState::idle;
  std::int64_t next_seq = 0;
  // -R: the scheduled start of the next transaction, once drawn.
  std::optional<std::int64_t> scheduled_mono_ns;
  std::optional<std::int64_t> lag_ns;  // of the transaction in flight
  int connect_failures = 0;            // -C: consecutive failed connects
  // Rows of failed reconnect attempts and -C connects (driver/reconnect.cpp):
  // failed query rows in the file (08001), not transactions: not counted
  // towards -t.
  std::int64_t attempt_rows = 0;
  // Scripts: the one running, its next command, the variables' values.
  std::size_t script = 0;
  std::size_t command = 0;
  bool sent_sql = false;  // the running script's transaction has sent SQL
  VariableValues values;  // empty until its first script (Worker::init_variables)
  Prng rng;               // its scripts' random functions (seeded from --random-seed)
  // \gset/\aset of the SQL command in flight: `storing` its kind;
  // `gset_rows` the rows of its last result (-1: the last was no row set)
  // and the first row's columns.
  ScriptCommand::Store storing = ScriptCommand::Store::none;
  int gset_rows = -1;
  std::vector<std::pair<std::string, std::string>> gset_columns;
  // \startpipeline … \endpipeline: in pipeline mode, syncs sent and not yet
  // answered.
  bool in_script_pipeline = false;
  int pipeline_syncs = 0;
  // --max-tries: the try of the transaction in flight (1 = first), when it
  // began, the time of its failed tries, the random state it started with;
  // `retrying`: a failed try is being rolled back, the script starts again next.
  int tries = 1;
  std::int64_t try_started_mono_ns = 0;
  std::int64_t retried_ns = 0;
  Prng rng_at_start;
  bool retrying = false;
  // -M prepared: which script commands (by statement id) are prepared on
  // connection `prepared_connection` (a new connection starts afresh).
  std::vector<std::uint8_t> prepared;
  int prepared_connection = -1;
  std::int64_t sleep_until_mono_ns = 0;
  std::int64_t sleep_started_mono_ns = 0;  // the \sleep in progress began
  std::int64_t slept_ns = 0;               // time in \sleep in the transaction in flight
  std::string query_text;                  // simple protocol: SQL with values in place
  std::vector<std::string> param_text;     // extended/prepared: $n values
  std::vector<const char*> param_ptrs;
  // The transaction in flight.
  std::int64_t sent_wall_ns = 0;
  std::int64_t sent_mono_ns = 0;
  std::int64_t rows = 0;
  bool failed = false;
  bool in_copy_out = false;
  bool cancel_sent = false;
  bool needs_rollback = false;
  std::optional<std::string> sqlstate;
  std::optional<std::string> error;
  // Reconnecting (driver/reconnect.cpp). `reconnecting`: counted in
  // ThreadStats::reconnecting, from the lost connection (or -C's first
  // failed connect) to the next connection. down_since: when it lost it;
  // waiting_since: the end of its previous row, the start of the next failed
  // attempt's row (wall and monotonic).
  bool reconnecting = false;
  std::int64_t down_since_mono_ns = 0;
  std::int64_t waiting_since_mono_ns = 0;
  std::int64_t waiting_since_wall_ns = 0;
  std::optional<std::string> failed_attempt;  // message of the attempt whose row is pending
  std::optional<std::string> lost_error;      // gave up (-t): the last failure
  int reset_attempts = 0;
  std::int64_t retry_at_mono_ns = 0;
  std::int64_t reset_started_mono_ns = 0;
  short reset_events = 0;
  // The socket registered with the thread's epoll instance (-1: none) and
  // its events. Unregistered before libpq may close or replace the socket
  // (reset, -C, finish), as a new socket may get the same number.
  int watched_fd = -1;
  std::uint32_t watched_events = 0;
  // --pipeline: transactions sent and not yet completed, oldest first.
  struct InFlight {
    std::int64_t sent_wall_ns = 0, sent_mono_ns = 0, rows = 0;
    bool failed = false;
    std::optional<std::string> sqlstate, error;
  };
  std::deque<InFlight> inflight;
  std::int64_t sent_count = 0;  // --pipeline: transactions sent (for -t)
  // -r: the SQL command in flight was sent at this time; rows of the
  // transaction's commands so far (delivered with its query row).
  std::int64_t statement_sent_mono_ns = 0;
  std::vector<schema::StatementLatencyRow> statement_rows;
};

}  // namespace stallscope::driver::detail
