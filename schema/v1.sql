-- stallscope run file, schema version 1 (PRAGMA user_version = 1).
-- Conventions: every *_ns column holding a point in time is nanoseconds since
-- the Unix epoch (CLOCK_REALTIME); every other *_ns column is a duration in
-- ns. "since the previous tick" columns are NULL when there is no previous
-- value (first sight of a process, first tick) — never 0 as a stand-in.

-- One row: what was run, where, and how it ended.
CREATE TABLE run (
  run_id              INTEGER PRIMARY KEY CHECK (run_id = 1),
  mode                TEXT NOT NULL,              -- 'run' (drive + sample) or 'record'
  status              TEXT NOT NULL,              -- 'running', 'complete', 'interrupted', 'failed'
  host                TEXT NOT NULL,              -- uname nodename
  kernel              TEXT NOT NULL,              -- uname release
  cores               INTEGER NOT NULL,           -- online CPUs
  clock_ticks_per_s   INTEGER NOT NULL,           -- sysconf(_SC_CLK_TCK)
  start_ns            INTEGER NOT NULL,
  end_ns              INTEGER,                    -- NULL while running or after SIGKILL
  command_line        TEXT NOT NULL,              -- argv, passwords masked
  conninfo            TEXT,                       -- masked; NULL when no database
  tool_version        TEXT NOT NULL,
  hz                  REAL NOT NULL,              -- sampling rate asked for
  stallscope_pid      INTEGER NOT NULL,           -- pid of the stallscope process (the driver)
  stallscope_start_ticks INTEGER,                 -- its start time, clock ticks since boot
  clients             INTEGER,                    -- driver: -c
  threads             INTEGER,                    -- driver: -j
  protocol            TEXT,                       -- driver: simple | extended | prepared
  sql                 TEXT,                       -- driver: the SQL each transaction runs
  server_version      TEXT,                       -- server_version of the database, if any
  end_reason          TEXT,                       -- e.g. 'duration reached', 'SIGINT', an error
  command             TEXT,                       -- record -- COMMAND: its argv, passwords masked
  command_exit_status INTEGER                     -- its exit status (128+signal if killed)
);

-- One row per sampler tick.
CREATE TABLE sample (
  sample_id           INTEGER PRIMARY KEY,        -- tick number, 1, 2, ...
  time_ns             INTEGER NOT NULL,           -- wall clock when the tick began
  mono_ns             INTEGER NOT NULL,           -- CLOCK_MONOTONIC when the tick began
  interval_ns         INTEGER,                    -- since the previous tick began; NULL on the first
  sampler_cpu_ns      INTEGER NOT NULL,           -- CPU time the sampler thread used for this tick
  sampler_duration_ns INTEGER NOT NULL            -- wall time the tick took
);

-- System-wide state per tick. CPU columns: time spent in each mode by all
-- CPUs together since the previous tick, ns (source: /proc/stat via libproc2,
-- ticks × 1e9 / clock_ticks_per_s). Their sum ≈ interval_ns × cores.
CREATE TABLE host_sample (
  sample_id           INTEGER PRIMARY KEY REFERENCES sample(sample_id),
  cpu_user_ns         INTEGER,
  cpu_nice_ns         INTEGER,
  cpu_system_ns       INTEGER,
  cpu_idle_ns         INTEGER,
  cpu_iowait_ns       INTEGER,
  cpu_irq_ns          INTEGER,
  cpu_softirq_ns      INTEGER,
  cpu_steal_ns        INTEGER,
  load1               REAL NOT NULL,              -- /proc/loadavg
  load5               REAL NOT NULL,
  load15              REAL NOT NULL,
  procs_running       INTEGER NOT NULL,           -- /proc/stat procs_running (R tasks now)
  procs_blocked       INTEGER NOT NULL,           -- /proc/stat procs_blocked (D tasks now)
  processes_total     INTEGER NOT NULL,           -- processes seen this tick
  processes_d_state   INTEGER NOT NULL            -- of those, in D state
);

-- A process, identified by (pid, start_ticks): pids are reused. comm and
-- cmdline are the latest seen (a process that calls exec is updated in
-- place). A process missing from one listing and seen again later may get a
-- second process_id.
CREATE TABLE process (
  process_id          INTEGER PRIMARY KEY,        -- assigned by the sampler
  pid                 INTEGER NOT NULL,
  start_ticks         INTEGER NOT NULL,           -- /proc/PID/stat field 22, ticks since boot
  start_ns            INTEGER,                    -- the same as wall clock
  ppid                INTEGER,
  comm                TEXT NOT NULL,              -- /proc/PID/stat comm, stored exactly
  cmdline             TEXT,                       -- arguments joined by spaces, passwords masked
  first_sample_id     INTEGER NOT NULL
);
CREATE INDEX process_by_pid ON process(pid, start_ticks);

-- Per tick, per active process (see README: CPU time moved, state R or D,
-- context switches changed; every process also at least every 10 s).
CREATE TABLE process_sample (
  sample_id           INTEGER NOT NULL,
  process_id          INTEGER NOT NULL,
  state               TEXT NOT NULL,              -- one letter: R S D T Z I ...
  cpu_ns              INTEGER,                    -- on-CPU time since its previous row's tick; /proc/PID/schedstat field 1
  run_delay_ns        INTEGER,                    -- runnable, not running, same span; schedstat field 2
  utime_ticks         INTEGER,                    -- user ticks, same span; /proc/PID/stat
  stime_ticks         INTEGER,                    -- system ticks, same span
  wchan               TEXT,                       -- kernel wait channel when not running, else NULL
  rss_bytes           INTEGER,
  majflt              INTEGER,                    -- major faults, same span
  voluntary_ctxt_switches    INTEGER,             -- same span; /proc/PID/status
  nonvoluntary_ctxt_switches INTEGER,             -- same span
  span_ns             INTEGER,                    -- the span the deltas cover (since its previous row)
  PRIMARY KEY (sample_id, process_id)
) WITHOUT ROWID;
CREATE INDEX process_sample_by_process ON process_sample(process_id, sample_id);

-- Active session history: per ASH tick, per non-idle backend of
-- pg_stat_activity (the ASH connection itself excluded).
CREATE TABLE pg_activity_sample (
  time_ns             INTEGER NOT NULL,           -- wall clock of the ASH poll
  ash_tick            INTEGER NOT NULL,           -- ASH poll number, 1, 2, ...
  pid                 INTEGER NOT NULL,
  backend_type        TEXT,
  state               TEXT,                       -- active, idle in transaction, ... (NULL for background processes)
  wait_event_type     TEXT,                       -- NULL = not waiting (on CPU, or an OS stall PostgreSQL cannot see)
  wait_event          TEXT,
  application_name    TEXT
);
CREATE INDEX pg_activity_sample_by_time ON pg_activity_sample(time_ns);

-- One row per ASH poll, so samples with no non-idle backend still count.
CREATE TABLE ash_tick (
  ash_tick            INTEGER PRIMARY KEY,
  time_ns             INTEGER NOT NULL,
  duration_ns         INTEGER NOT NULL            -- round trip of the poll
);

-- One row per driver client (connection).
CREATE TABLE client (
  client_id           INTEGER PRIMARY KEY,        -- 0 .. clients-1
  thread              INTEGER NOT NULL,           -- driver thread serving it
  backend_pid         INTEGER,                    -- PQbackendPID of its connection
  connect_ns          INTEGER,                    -- wall clock when connected
  connect_latency_ns  INTEGER,                    -- time PQconnect took
  application_name    TEXT
);

-- One row per query (transaction) the driver sent.
CREATE TABLE query (
  client_id           INTEGER NOT NULL,
  seq                 INTEGER NOT NULL,           -- 0, 1, ... per client
  start_ns            INTEGER NOT NULL,           -- wall clock when sent
  latency_ns          INTEGER NOT NULL,           -- sent → last result, CLOCK_MONOTONIC
  sqlstate            TEXT,                       -- NULL on success, else the SQLSTATE (or 'XX000'-like libpq failure)
  rows                INTEGER,                    -- rows returned (or affected)
  error               TEXT,                       -- error message on failure, else NULL
  PRIMARY KEY (client_id, seq)
) WITHOUT ROWID;
CREATE INDEX query_by_start ON query(start_ns);
