-- stallscope run file, schema version 5 (PRAGMA user_version = 5;
-- schema/store.h kSchemaVersion; version 2 files, which lack pg_session,
-- pg_session_idle and record_client, are read as files without them,
-- version 2 and 3 files as files without run.rate_tps, and version 2 to 4
-- files as files without run.machine_id, run.boot_id, client.local_addr and
-- client.local_port). The file keeps its
-- first name, v1.sql.
-- Conventions: every *_ns column holding a point in time is nanoseconds since
-- the Unix epoch (CLOCK_REALTIME); every other *_ns column is a duration in
-- ns. "since the previous tick" columns are NULL when there is no previous
-- value (first sight of a process, first tick) — never 0 as a stand-in.

-- One row: what was run, where, and how it ended.
CREATE TABLE run (
  run_id              INTEGER PRIMARY KEY CHECK (run_id = 1),
  mode                TEXT NOT NULL,              -- 'run' (drive + sample), 'record' (sample only) or 'import-pgbench' (a pgbench log imported)
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
  threads             INTEGER,                    -- driver: -j; import-pgbench: the log files imported (pgbench writes one per thread)
  protocol            TEXT,                       -- driver: simple | extended | prepared
  sql                 TEXT,                       -- driver: the SQL each transaction runs
  server_version      TEXT,                       -- server_version of the database, if any
  end_reason          TEXT,                       -- e.g. 'duration reached', 'SIGINT', an error
  command             TEXT,                       -- record -- COMMAND: its argv, passwords masked
  command_exit_status INTEGER,                    -- its exit status (128+signal if killed)
  delayacct_set       INTEGER,                    -- --delayacct: 1 = stallscope set kernel.task_delayacct=1 (restored to 0 at exit), 0 = it was already on or could not be set; NULL without --delayacct
  kernel_stacks       TEXT,                       -- --stacks: 'collected', or 'unavailable: <reason>' (not root); NULL without --stacks
  rate_tps            REAL,                       -- driver: -R, the fixed rate asked for (transactions per second over all clients); NULL for a closed loop (schema version 4)
  machine_id          TEXT,                       -- /etc/machine-id of the host that sampled; NULL for import-pgbench (the log's host is not known) and before schema version 5
  boot_id             TEXT                        -- /proc/sys/kernel/random/boot_id, the same
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
  first_sample_id     INTEGER NOT NULL,
  cgroup              TEXT                        -- latest seen: cgroup v2 path, or the v1 cpu controller's; /proc/PID/cgroup
);
CREATE INDEX process_by_pid ON process(pid, start_ticks);

-- Kernel wait channel names, each stored once: process_tick and thread_tick
-- hold a wchan_id. Source: /proc/PID/wchan (and task/TID/wchan) without a
-- compiler clone suffix (".constprop.0", ".isra.0").
CREATE TABLE wchan (
  wchan_id            INTEGER PRIMARY KEY,        -- assigned by the writer, 1, 2, ... in first-seen order
  name                TEXT NOT NULL UNIQUE        -- e.g. do_epoll_wait, folio_wait_bit_common
);

-- Thread names, each stored once: thread_tick holds a thread_comm_id.
-- Source: /proc/PID/task/TID/stat comm, stored exactly.
CREATE TABLE thread_comm (
  thread_comm_id      INTEGER PRIMARY KEY,        -- assigned by the writer, 1, 2, ...
  comm                TEXT NOT NULL UNIQUE
);

-- Per tick, per active process (see docs/run-file.md: CPU time moved, state R or D,
-- context switches changed; asleep on a wait channel that is not a wait for
-- work and not run since, e.g. a full pipe; every process also at least every
-- 10 s). Query
-- the view process_sample, which gives every column with its name and unit;
-- this table is its compact stored form (wchan as an id; majflt, read_bytes,
-- write_bytes and kernel_stack in process_io_sample, only when not 0/NULL;
-- span_ns 0 for "one tick"; rss in KiB).
CREATE TABLE process_tick (
  sample_id           INTEGER NOT NULL,
  process_id          INTEGER NOT NULL,
  state               TEXT NOT NULL,              -- one letter: R S D T Z I ...
  cpu_ns              INTEGER,                    -- on-CPU time since its previous row's tick; /proc/PID/schedstat field 1
  run_delay_ns        INTEGER,                    -- runnable, not running, same span; schedstat field 2
  utime_ticks         INTEGER,                    -- user ticks, same span; /proc/PID/stat
  stime_ticks         INTEGER,                    -- system ticks, same span
  wchan_id            INTEGER,                    -- wchan.wchan_id: kernel wait channel when not running, else NULL; /proc/PID/wchan
  rss_kib             INTEGER,                    -- resident set, KiB: /proc/PID/stat rss pages × page size ÷ 1024 (the view gives rss_bytes)
  voluntary_ctxt_switches    INTEGER,             -- same span; /proc/PID/status
  nonvoluntary_ctxt_switches INTEGER,             -- same span
  span_ns             INTEGER,                    -- the span the deltas cover (since its previous row), ns; 0 = exactly this tick's sample.interval_ns (its previous row was at the previous tick); NULL at first sight
  blkio_delay_ns      INTEGER,                    -- time waiting for block I/O, same span; /proc/PID/stat field 42 (delayacct; NULL while kernel.task_delayacct=0)
  PRIMARY KEY (sample_id, process_id)
) WITHOUT ROWID;
-- No index by process_id: explain reads this table in key order, and such
-- an index cost ~11 bytes a row (measured with dbstat); a query for one
-- process scans the table (or, for many, CREATE INDEX on a copy).

-- The rarely non-zero columns of a process_tick row: a row here only when
-- majflt, read_bytes or write_bytes is not 0 (or is NULL while span_ns is
-- not: /proc/PID/io unreadable), or kernel_stack is not NULL. Without a row
-- the view process_sample gives 0 for the three counts (NULL at first sight)
-- and NULL for kernel_stack.
CREATE TABLE process_io_sample (
  sample_id           INTEGER NOT NULL,
  process_id          INTEGER NOT NULL,
  majflt              INTEGER,                    -- major faults, same span as process_tick; /proc/PID/stat field 12
  read_bytes          INTEGER,                    -- storage bytes read, same span; /proc/PID/io read_bytes (NULL: unreadable)
  write_bytes         INTEGER,                    -- storage bytes written, same span; /proc/PID/io write_bytes (NULL: unreadable)
  kernel_stack        TEXT,                       -- --stacks, state D only: /proc/PID/stack, one frame per line
  PRIMARY KEY (sample_id, process_id)
) WITHOUT ROWID;

-- What a client process of a record (the command record started and its
-- descendants, --client-process names, the sessions' socket owners) waited
-- on when its process_tick row found it asleep in a system call on fds
-- (poll, select, epoll_wait, or a blocking read) — or its thread_tick row,
-- for a client sampled per thread: the task's blocked system call
-- (/proc/PID/syscall, /proc/PID/task/TID/syscall), whether it has a timeout, and the sockets
-- among the fds it waited on (sampler/poll_wait.h). A wait on a database
-- socket (a TCP socket to the server's or a pooler's port, a Unix socket to
-- a .s.PGSQL.* file) is a wait for the database — when it is among other
-- peers (an event loop that also waits for its own clients), only while
-- bytes are queued on it; a timed wait on no socket
-- to another process is the client's own timer (think time inside an event
-- loop); any other is a wait for something else (its own clients, another
-- service, a pipe). Absent from files made before it existed (read as
-- unknown); database_sockets and tid absent from files of version 3 made
-- before them (their rows are the process rows').
CREATE TABLE process_poll (
  sample_id           INTEGER NOT NULL,           -- process_tick.sample_id (or thread_tick's)
  process_id          INTEGER NOT NULL,           -- process_tick.process_id (or thread_tick's)
  tid                 INTEGER NOT NULL DEFAULT 0, -- 0: the process_tick row (its main thread); else the thread_tick row's tid
  syscall             TEXT NOT NULL,              -- epoll_wait, epoll_pwait, epoll_pwait2, poll, ppoll, select, pselect6, read, readv, recvfrom, recvmsg
  timed               INTEGER NOT NULL,           -- 1: with a finite timeout; 0: none (waits for an fd for ever)
  peer_sockets        INTEGER,                    -- waited fds that are sockets to another process (TCP; Unix whose peer it does not hold); NULL: unreadable
  database_sockets    INTEGER,                    -- of those, the database's: TCP to a database port (the server's, a pooler's), Unix to a .s.PGSQL.* file; NULL: unreadable
  database_queued     INTEGER,                    -- of those, the ones with bytes queued either way (a query the server has not read, an answer the client has not); NULL: unreadable
  PRIMARY KEY (sample_id, process_id, tid)
) WITHOUT ROWID;

-- What users and explain query: one row per process_tick row, every column
-- decoded (units and sources as in process_tick and process_io_sample;
-- span_ns always the span in ns, NULL at first sight).
CREATE VIEW process_sample AS
SELECT t.sample_id, t.process_id, t.state, t.cpu_ns, t.run_delay_ns, t.utime_ticks,
       t.stime_ticks, w.name AS wchan, t.rss_kib * 1024 AS rss_bytes,
       CASE WHEN io.sample_id IS NOT NULL THEN io.majflt WHEN t.span_ns IS NOT NULL THEN 0 END
         AS majflt,
       t.voluntary_ctxt_switches, t.nonvoluntary_ctxt_switches,
       CASE t.span_ns WHEN 0 THEN (SELECT s.interval_ns FROM sample s
                                   WHERE s.sample_id = t.sample_id) ELSE t.span_ns END AS span_ns,
       CASE WHEN io.sample_id IS NOT NULL THEN io.read_bytes WHEN t.span_ns IS NOT NULL THEN 0 END
         AS read_bytes,
       CASE WHEN io.sample_id IS NOT NULL THEN io.write_bytes WHEN t.span_ns IS NOT NULL THEN 0 END
         AS write_bytes,
       t.blkio_delay_ns, io.kernel_stack
FROM process_tick t
LEFT JOIN wchan w ON w.wchan_id = t.wchan_id
LEFT JOIN process_io_sample io ON io.sample_id = t.sample_id AND io.process_id = t.process_id;

-- Per tick, per thread of a process sampled per thread (--threads: every
-- process; by default a multi-threaded process whose CPU over the last second
-- reached half a core; never stallscope's own threads under `record`). A row
-- when the thread ran or switched since its last row, or is in state R or D;
-- rows of a tick in (process_id, tid) order; first sight: deltas NULL. Source
-- /proc/PID/task/TID/{stat,schedstat,wchan,stack}. Query the view
-- thread_sample; this is its compact stored form.
CREATE TABLE thread_tick (
  sample_id           INTEGER NOT NULL,
  process_id          INTEGER NOT NULL,           -- the process the thread belongs to
  tid                 INTEGER NOT NULL,
  thread_comm_id      INTEGER NOT NULL,           -- thread_comm.thread_comm_id: thread name (task/TID/stat comm)
  state               TEXT NOT NULL,              -- one letter
  cpu_ns              INTEGER,                    -- on-CPU time since its previous row; schedstat field 1
  run_delay_ns        INTEGER,                    -- runnable, not running, same span; schedstat field 2
  wchan_id            INTEGER,                    -- wchan.wchan_id: kernel wait channel when not running, else NULL
  kernel_stack        TEXT,                       -- --stacks, state D only
  span_ns             INTEGER,                    -- the span the deltas cover, ns; 0 = exactly this tick's sample.interval_ns; NULL at first sight
  PRIMARY KEY (sample_id, process_id, tid)
) WITHOUT ROWID;

-- One row per thread_tick row, names and span_ns decoded.
CREATE VIEW thread_sample AS
SELECT t.sample_id, t.process_id, t.tid, c.comm, t.state, t.cpu_ns, t.run_delay_ns,
       w.name AS wchan, t.kernel_stack,
       CASE t.span_ns WHEN 0 THEN (SELECT s.interval_ns FROM sample s
                                   WHERE s.sample_id = t.sample_id) ELSE t.span_ns END AS span_ns
FROM thread_tick t
LEFT JOIN thread_comm c ON c.thread_comm_id = t.thread_comm_id
LEFT JOIN wchan w ON w.wchan_id = t.wchan_id;

-- System memory, VM activity and pressure per tick. PSI columns: stall time
-- since the previous tick, µs (/proc/pressure/{cpu,io,memory} total=; NULL
-- where the file or line is absent). Memory: /proc/meminfo via libproc2.
-- VM counts: since the previous tick, /proc/vmstat via libproc2.
CREATE TABLE host_memory_sample (
  sample_id           INTEGER PRIMARY KEY,
  psi_cpu_some_us     INTEGER,
  psi_cpu_full_us     INTEGER,
  psi_io_some_us      INTEGER,
  psi_io_full_us      INTEGER,
  psi_memory_some_us  INTEGER,
  psi_memory_full_us  INTEGER,
  mem_available_bytes INTEGER,                    -- MemAvailable
  mem_dirty_bytes     INTEGER,                    -- Dirty
  mem_writeback_bytes INTEGER,                    -- Writeback
  swap_used_bytes     INTEGER,                    -- SwapTotal - SwapFree
  major_faults        INTEGER,                    -- pgmajfault
  swap_in_pages       INTEGER,                    -- pswpin
  swap_out_pages      INTEGER,                    -- pswpout
  page_in_kib         INTEGER,                    -- pgpgin (KiB)
  page_out_kib        INTEGER                     -- pgpgout (KiB)
);

-- Per tick, per block device (/proc/diskstats via libproc2), counts since the
-- previous tick; a device with no activity since then (no read or write
-- completed, none in flight, no busy time) gets no row, so over a period a
-- device is busy sum(busy_ns) ÷ the period's length. A device's first tick
-- gives no row.
CREATE TABLE disk_sample (
  sample_id           INTEGER NOT NULL,
  device              TEXT NOT NULL,              -- e.g. sda, nvme0n1p1
  reads               INTEGER NOT NULL,           -- reads completed
  writes              INTEGER NOT NULL,           -- writes completed
  read_sectors        INTEGER NOT NULL,           -- 512-byte sectors read
  write_sectors       INTEGER NOT NULL,           -- 512-byte sectors written
  in_flight           INTEGER NOT NULL,           -- I/Os in progress now
  busy_ns             INTEGER NOT NULL,           -- time with I/O in progress (busy_ns / span_ns = utilisation)
  weighted_ns         INTEGER NOT NULL,           -- weighted time (÷ span_ns = average queue length)
  span_ns             INTEGER NOT NULL,           -- the span the counts cover: since the previous tick
  PRIMARY KEY (sample_id, device)
) WITHOUT ROWID;

-- Per tick, per cgroup holding a sampled active process: CPU throttling
-- since the cgroup's previous row (cgroup cpu.stat: v1 nr_throttled and
-- throttled_time ns under /sys/fs/cgroup/cpu,cpuacct or /sys/fs/cgroup/cpu;
-- v2 nr_throttled and throttled_usec). First sight: deltas NULL.
CREATE TABLE cgroup_sample (
  sample_id           INTEGER NOT NULL,
  cgroup              TEXT NOT NULL,              -- as process.cgroup
  nr_periods          INTEGER,                    -- enforcement periods elapsed, same span
  nr_throttled        INTEGER,                    -- periods in which the cgroup was throttled
  throttled_ns        INTEGER,                    -- time throttled
  span_ns             INTEGER,                    -- since its previous row
  PRIMARY KEY (sample_id, cgroup)
) WITHOUT ROWID;

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
  application_name    TEXT,
  query_id            INTEGER,                    -- pg_stat_activity.query_id (PG 14+, compute_query_id on); else NULL
  query_text_id       INTEGER,                    -- pg_query_text row of its query text
  client_addr         TEXT,
  client_port         INTEGER,
  backend_start_ns    INTEGER,                    -- wall clock
  xact_start_ns       INTEGER,
  query_start_ns      INTEGER,
  state_change_ns     INTEGER,
  blocking_pids       TEXT                        -- wait_event_type = 'Lock': pg_blocking_pids(pid), comma-separated
);
CREATE INDEX pg_activity_sample_by_time ON pg_activity_sample(time_ns);

-- Query text, stored once per distinct query: per query_id when the server
-- computes one, else per distinct text.
CREATE TABLE pg_query_text (
  query_text_id       INTEGER PRIMARY KEY,        -- assigned by the ASH sampler
  query_id            INTEGER,                    -- pg_stat_activity.query_id, if any
  query               TEXT NOT NULL,              -- the first text seen (truncated by track_activity_query_size)
  first_time_ns       INTEGER NOT NULL            -- wall clock of the poll that first saw it
);

-- One row per ASH poll, so samples with no non-idle backend still count.
CREATE TABLE ash_tick (
  ash_tick            INTEGER PRIMARY KEY,
  time_ns             INTEGER NOT NULL,
  duration_ns         INTEGER NOT NULL            -- round trip of the poll
);

-- One row per database session the ASH sampler saw (any state, idle
-- included), identified by (pid, backend_start_ns); written at first sight.
-- pg_activity_sample rows (non-idle polls) join it on (pid,
-- backend_start_ns); its idle polls are in pg_session_idle.
CREATE TABLE pg_session (
  session_id          INTEGER PRIMARY KEY,        -- assigned by the ASH sampler, 1, 2, ... in first-seen order
  pid                 INTEGER NOT NULL,           -- the backend's pid
  backend_start_ns    INTEGER,                    -- pg_stat_activity.backend_start, wall clock
  backend_type        TEXT,                       -- 'client backend', 'checkpointer', ...
  application_name    TEXT,                       -- as first seen
  client_addr         TEXT,                       -- host(client_addr); NULL over a Unix socket
  client_port         INTEGER,                    -- the client's TCP port; -1 over a Unix socket
  usename             TEXT,
  datname             TEXT,
  first_ash_tick      INTEGER NOT NULL,           -- the poll that first saw it
  client_pid          INTEGER,                    -- `record`, same host: the process owning the TCP socket whose local port is client_port and remote port the server's (/proc/net/tcp{,6}, /proc/PID/fd), looked up once at first sight; NULL when not found
  client_start_ticks  INTEGER                     -- its start time (/proc/PID/stat field 22): (client_pid, client_start_ticks) is a process row
);

-- The polls in which a session was 'idle' (waiting for its client), run-
-- length encoded: one row per stretch of consecutive polls (ash_tick
-- first_ash_tick, +1, ..., +polls-1), a stretch closed when the session
-- leaves 'idle', disappears, the poll fails, or after 60 s (so a killed
-- record loses at most a minute of it). Idle polls have no
-- pg_activity_sample row.
CREATE TABLE pg_session_idle (
  session_id          INTEGER NOT NULL,           -- pg_session.session_id
  first_ash_tick      INTEGER NOT NULL,
  polls               INTEGER NOT NULL,           -- consecutive idle polls from first_ash_tick
  PRIMARY KEY (session_id, first_ash_tick)
) WITHOUT ROWID;

-- `record`: processes named as the database's clients. source 'command':
-- the command record started (after --), pid and start_ticks set — explain
-- takes it and its descendants (process.ppid); source 'comm': --client-process
-- NAME, comm set — explain takes every process of that comm.
CREATE TABLE record_client (
  source              TEXT NOT NULL,              -- 'command' or 'comm'
  pid                 INTEGER,                    -- 'command': its pid
  start_ticks         INTEGER,                    -- 'command': /proc/PID/stat field 22
  comm                TEXT                        -- 'comm': the name given
);

-- One row per driver connection: a client's first connection is 0, each
-- reconnect after a lost connection (and, with -C, each transaction) opens
-- the next, so every backend pid that ever served the run stays mapped.
CREATE TABLE client (
  client_id           INTEGER NOT NULL,           -- 0 .. clients-1
  connection          INTEGER NOT NULL,           -- 0, 1, ... per client, in connect order
  thread              INTEGER NOT NULL,           -- driver thread serving it
  backend_pid         INTEGER,                    -- PQbackendPID of this connection
  connect_ns          INTEGER,                    -- wall clock when connected
  connect_latency_ns  INTEGER,                    -- connect start → usable (PQconnectdb / PQresetPoll OK)
  application_name    TEXT,
  local_addr          TEXT,                       -- the client end of its TCP socket (getsockname): the server's pg_stat_activity.client_addr; NULL over a Unix socket, and before schema version 5
  local_port          INTEGER,                    -- its port: pg_stat_activity.client_port
  PRIMARY KEY (client_id, connection)
) WITHOUT ROWID;

-- One row per query (transaction) the driver sent, clustered by start time
-- (the primary key starts with start_ns, so time ranges read the table in
-- its own order and the writer appends). The backend that served a query is
-- client.backend_pid of (client_id, connection). A failed query also has a
-- row in query_error; a transaction skipped as late (-R -L --skip-late) was
-- never sent and is in query_skipped instead (its seq is not reused). The
-- rarely set columns live in those tables so that a successful query's row
-- stays small (about 29 bytes on disk).
CREATE TABLE query (
  start_ns            INTEGER NOT NULL,           -- wall clock when sent (with -R: when scheduled)
  client_id           INTEGER NOT NULL,
  seq                 INTEGER NOT NULL,           -- 0, 1, ... per client (transactions, sent or skipped)
  latency_ns          INTEGER NOT NULL,           -- sent → last result, CLOCK_MONOTONIC (with -R: from the scheduled start)
  connection          INTEGER,                    -- client.connection that served it (NULL: no connection, or imported)
  rows                INTEGER,                    -- rows returned (or affected); NULL when it failed
  lag_ns              INTEGER,                    -- -R only: scheduled start → sent, ns
  PRIMARY KEY (start_ns, client_id, seq)
) WITHOUT ROWID;

-- One row per failed query: the key of its row in `query`, and why.
CREATE TABLE query_error (
  start_ns            INTEGER NOT NULL,           -- query.start_ns
  client_id           INTEGER NOT NULL,           -- query.client_id
  seq                 INTEGER NOT NULL,           -- query.seq
  sqlstate            TEXT NOT NULL,              -- the server's SQLSTATE; 08006 connection lost, XX000 other libpq failure (import-pgbench: 40001 serialization, 40P01 deadlock, XX000 failed)
  error               TEXT,                       -- the error message (the server's primary message, or libpq's)
  PRIMARY KEY (start_ns, client_id, seq)
) WITHOUT ROWID;

-- -R -L --skip-late: one row per transaction not sent because it was already
-- later than -L at its turn (pgbench's "skipped"). Not in `query`.
-- import-pgbench: pgbench logs a skipped transaction at the time it was
-- skipped with a schedule lag of 0, so there start_ns is that time and
-- lag_ns is 0.
CREATE TABLE query_skipped (
  start_ns            INTEGER NOT NULL,           -- wall clock of its scheduled start
  client_id           INTEGER NOT NULL,
  seq                 INTEGER NOT NULL,           -- its place in the client's sequence
  lag_ns              INTEGER NOT NULL,           -- scheduled start → the moment it was skipped, ns
  PRIMARY KEY (start_ns, client_id, seq)
) WITHOUT ROWID;

-- `run`: one row per transaction cut short at the run's end (-T reached, a
-- signal, the server lost, a full disk): sent, but unanswered when the driver
-- stopped waiting for it (200 ms after the end, a cancel request, 500 ms
-- more). Not in `query` (tps and latency count answered transactions only,
-- as pgbench's do); explain counts its time in flight, so a stall that lasts
-- to the end of a run is seen. Absent from files made before it existed;
-- read as none.
CREATE TABLE query_unfinished (
  start_ns            INTEGER NOT NULL,           -- wall clock when sent (with -R: when scheduled)
  client_id           INTEGER NOT NULL,
  seq                 INTEGER NOT NULL,           -- its place in the client's sequence
  elapsed_ns          INTEGER NOT NULL,           -- start → the moment the driver gave up on it, CLOCK_MONOTONIC
  connection          INTEGER,                    -- client.connection it was sent on
  lag_ns              INTEGER,                    -- -R only: scheduled start → sent, ns
  PRIMARY KEY (start_ns, client_id, seq)
) WITHOUT ROWID;

-- Scripts with \sleep: one row per transaction that slept, with the time it
-- spent in \sleep (its latency includes it, as pgbench's does). Query time
-- (explain) is the latency net of it. A transaction cut short at the end
-- (query_unfinished) has one too, with the time it slept up to then, under
-- the same key. Absent from files made before it existed; read as no sleeps.
CREATE TABLE query_sleep (
  start_ns            INTEGER NOT NULL,           -- query.start_ns
  client_id           INTEGER NOT NULL,           -- query.client_id
  seq                 INTEGER NOT NULL,           -- query.seq
  sleep_ns            INTEGER NOT NULL,           -- time in \sleep commands, CLOCK_MONOTONIC (asked for + wake-up delay)
  PRIMARY KEY (start_ns, client_id, seq)
) WITHOUT ROWID;

-- --max-tries: one row per transaction that was tried more than once (a
-- serialization or deadlock failure, rolled back and run again from the
-- script's start); its query row is the last try's outcome, its latency
-- from the first try's start. Absent from files made before it existed;
-- read as no retries.
CREATE TABLE query_retry (
  start_ns            INTEGER NOT NULL,           -- query.start_ns
  client_id           INTEGER NOT NULL,           -- query.client_id
  seq                 INTEGER NOT NULL,           -- query.seq
  tries               INTEGER NOT NULL,           -- tries in all (≥ 2)
  retried_ns          INTEGER NOT NULL,           -- time in the tries that failed, rollbacks included, CLOCK_MONOTONIC
  PRIMARY KEY (start_ns, client_id, seq)
) WITHOUT ROWID;

-- Server clock against the driver host's clock (`run`): at the start, every
-- 10 s and at the end, several bracketed `SELECT clock_timestamp()` round
-- trips; the one with the smallest round trip is kept. A server-side
-- `record` file's times map to this file's clock as server_ns - offset_ns.
CREATE TABLE clock_offset (
  time_ns             INTEGER PRIMARY KEY,        -- client wall clock at the middle of the kept round trip
  offset_ns           INTEGER NOT NULL,           -- server clock - client clock, ns (server_ns = client_ns + offset_ns)
  uncertainty_ns      INTEGER NOT NULL,           -- ± bound: half the kept round trip
  rtt_ns              INTEGER NOT NULL,           -- the kept round trip, CLOCK_MONOTONIC
  probes              INTEGER NOT NULL,           -- round trips made for this estimate
  phase               TEXT NOT NULL               -- 'start', 'periodic', 'end'
);

-- `run -r`: the SQL commands of the scripts, so statement_latency rows can
-- name theirs. Source: the scripts as parsed (for --sql, the one string).
CREATE TABLE statement (
  statement           INTEGER PRIMARY KEY,        -- 0, 1, ... over the scripts' SQL commands, in script order
  script              TEXT NOT NULL,              -- script name (file, "builtin: …", or "--sql")
  line                INTEGER NOT NULL,           -- 1-based line of the command in its script
  sql                 TEXT NOT NULL               -- the command as written (with :variables)
);

-- `run -r`: one row per SQL command of each transaction (pgbench -r's
-- per-statement latency, stored per execution). Joins to query on
-- (start_ns, client_id, seq) of its transaction.
CREATE TABLE statement_latency (
  start_ns            INTEGER NOT NULL,           -- query.start_ns of the transaction
  client_id           INTEGER NOT NULL,
  seq                 INTEGER NOT NULL,           -- query.seq of the transaction
  statement           INTEGER NOT NULL,           -- statement.statement
  latency_ns          INTEGER NOT NULL,           -- command sent → its last result, CLOCK_MONOTONIC
  PRIMARY KEY (start_ns, client_id, seq, statement)
) WITHOUT ROWID;

-- TCP_INFO of each driver connection over TCP, read by the driver thread
-- that owns the socket about once a second (getsockopt(PQsocket,
-- IPPROTO_TCP, TCP_INFO)). Unix-socket connections have no rows.
CREATE TABLE tcp_sample (
  time_ns             INTEGER NOT NULL,           -- client wall clock when read
  client_id           INTEGER NOT NULL,
  connection          INTEGER NOT NULL,           -- client.connection
  rtt_ns              INTEGER NOT NULL,           -- tcpi_rtt (kernel's smoothed RTT, µs) × 1000
  rttvar_ns           INTEGER NOT NULL,           -- tcpi_rttvar (µs) × 1000
  total_retrans       INTEGER NOT NULL,           -- tcpi_total_retrans: segments retransmitted since connect (counter)
  unacked             INTEGER NOT NULL,           -- tcpi_unacked: segments sent, not yet acknowledged (gauge)
  PRIMARY KEY (time_ns, client_id, connection)
) WITHOUT ROWID;

-- `run` / `record --pooler-admin CONNINFO`: pgbouncer's admin console polled
-- every --pooler-period (default 1 s) with SHOW STATS (per database, counters
-- since pgbouncer started) and SHOW POOLS (per database and user, gauges
-- now), one row per database per poll; the admin pseudo-database "pgbouncer"
-- is left out. Counters are stored as deltas since the previous poll of the
-- same connection (µs → ns); they are NULL on the first poll, after a
-- reconnect, and when a counter went backwards (pgbouncer restarted). A
-- database first seen after an earlier poll counts from 0 (its pool did not
-- exist then). Columns the installed pgbouncer does not have stay NULL.
CREATE TABLE pooler_sample (
  time_ns             INTEGER NOT NULL,           -- wall clock when SHOW STATS returned
  database            TEXT NOT NULL,              -- SHOW STATS / SHOW POOLS "database": the name clients connect to
  interval_ns         INTEGER,                    -- since the previous poll, CLOCK_REALTIME; NULL on the first poll
  xacts               INTEGER,                    -- total_xact_count delta: transactions (pooled) completed
  queries             INTEGER,                    -- total_query_count delta
  wait_ns             INTEGER,                    -- total_wait_time delta (µs) × 1000: time clients waited for a server connection
  xact_ns             INTEGER,                    -- total_xact_time delta (µs) × 1000: time in transactions (pgbouncer 1.18 counts from the client's first query: includes wait_ns)
  query_ns            INTEGER,                    -- total_query_time delta (µs) × 1000: time in queries on a server connection
  cl_active           INTEGER,                    -- SHOW POOLS cl_active, summed over the database's users (gauge)
  cl_waiting          INTEGER,                    -- cl_waiting: clients queued for a server connection (gauge)
  sv_active           INTEGER,                    -- sv_active: server connections linked to a client (gauge)
  sv_idle             INTEGER,                    -- sv_idle: server connections free to use (gauge)
  sv_used             INTEGER,                    -- sv_used: server connections idle for longer than server_check_delay (gauge)
  maxwait_ns          INTEGER,                    -- max over users of maxwait (s) × 1e9 + maxwait_us × 1000: the oldest waiting client's wait
  PRIMARY KEY (time_ns, database)
) WITHOUT ROWID;

-- `stallscope import-pgbench` of a pgbench aggregate log (--aggregate-interval,
-- PostgreSQL 15-17 format): one row per interval per log line. Source: the
-- log; µs values converted to ns (sums of squares kept in µs², as logged).
CREATE TABLE pgbench_aggregate (
  file                TEXT NOT NULL,              -- log file as given
  line                INTEGER NOT NULL,           -- 1-based line in it
  interval_start_ns   INTEGER NOT NULL,           -- interval_start (epoch s) × 1e9
  transactions        INTEGER NOT NULL,           -- num_transactions
  latency_sum_ns      INTEGER NOT NULL,           -- sum_latency
  latency_sum2_us2    REAL NOT NULL,              -- sum_latency_2, µs²
  latency_min_ns      INTEGER,                    -- min_latency (NULL when no transaction)
  latency_max_ns      INTEGER,                    -- max_latency
  lag_sum_ns          INTEGER,                    -- sum_lag (0 without -R, as logged)
  lag_sum2_us2        REAL,                       -- sum_lag_2, µs²
  lag_min_ns          INTEGER,                    -- min_lag
  lag_max_ns          INTEGER,                    -- max_lag
  skipped             INTEGER,                    -- skipped (-R -L)
  retried             INTEGER,                    -- retried (--max-tries ≠ 1)
  retries             INTEGER,                    -- retries
  serialization_failures INTEGER,                 -- serialization_failures
  deadlock_failures   INTEGER,                    -- deadlock_failures
  PRIMARY KEY (file, line)
) WITHOUT ROWID;
-- import-pgbench looks up the intervals already imported by their start.
CREATE INDEX pgbench_aggregate_by_interval ON pgbench_aggregate(interval_start_ns);

-- The host's TCP counters, read by the host sampler at the first tick of
-- each second: /proc/net/netstat (TcpExt) and /proc/net/snmp (Tcp) of the
-- sampler's network namespace, as deltas since the previous read (span_ns
-- long). Host-wide: every TCP socket of the namespace counts, not only the
-- run's. NULL on the first read, when the kernel lacks the counter, and
-- when it went backwards. Files written before this table existed lack it:
-- explain reads that as absent.
CREATE TABLE tcp_stack_sample (
  sample_id           INTEGER PRIMARY KEY,        -- sample.sample_id (the host tick that read them)
  span_ns             INTEGER,                    -- since the previous read, CLOCK_MONOTONIC; NULL on the first
  delayed_acks        INTEGER,                    -- TcpExt DelayedACKs: ACKs sent when the delayed-ACK timer fired
  delayed_ack_locked  INTEGER,                    -- TcpExt DelayedACKLocked: the timer fired while the socket was locked by its user
  delayed_ack_lost    INTEGER,                    -- TcpExt DelayedACKLost: a segment came again that had been ACKed late
  timeouts            INTEGER,                    -- TcpExt TCPTimeouts: retransmission timeouts (RTO)
  loss_probes         INTEGER,                    -- TcpExt TCPLossProbes: tail loss probes sent
  slow_start_retrans  INTEGER,                    -- TcpExt TCPSlowStartRetrans
  fast_retrans        INTEGER,                    -- TcpExt TCPFastRetrans
  syn_retrans         INTEGER,                    -- TcpExt TCPSynRetrans: SYN and SYN-ACK retransmissions
  zero_window_drop    INTEGER,                    -- TcpExt TCPZeroWindowDrop: segments dropped at a zero window
  to_zero_window_adv  INTEGER,                    -- TcpExt TCPToZeroWindowAdv: window advertised as 0 (the receiver not reading)
  want_zero_window_adv INTEGER,                   -- TcpExt TCPWantZeroWindowAdv: a zero window was wanted
  rcvq_drop           INTEGER,                    -- TcpExt TCPRcvQDrop: segments dropped, receive queue full
  listen_overflows    INTEGER,                    -- TcpExt ListenOverflows: accept queue full
  listen_drops        INTEGER,                    -- TcpExt ListenDrops: SYNs dropped at a listener
  retrans_segs        INTEGER,                    -- Tcp RetransSegs: segments retransmitted
  out_segs            INTEGER,                    -- Tcp OutSegs: segments sent
  in_segs             INTEGER,                    -- Tcp InSegs: segments received
  in_errs             INTEGER,                    -- Tcp InErrs: segments received in error
  out_rsts            INTEGER                     -- Tcp OutRsts: resets sent
);

-- PostgreSQL statistics, read by the ASH sampler on its own connection
-- (sampler/pg_stats_sampler.cpp): settings once, counters about once a
-- second, pg_stat_statements every 10 s and at the end. Absent from files
-- made before they existed; explain reads such a file as one without them.

-- The settings explain names as culprits, read once when the ASH sampler
-- first connects. Source: pg_settings.
CREATE TABLE pg_setting (
  name                TEXT PRIMARY KEY,           -- e.g. synchronous_standby_names, work_mem, jit
  setting             TEXT,                       -- pg_settings.setting, in `unit`
  unit                TEXT,                       -- pg_settings.unit: 'kB', '8kB', 'ms', 's', 'MB'; NULL: none
  time_ns             INTEGER NOT NULL            -- wall clock when read
) WITHOUT ROWID;

-- One row per poll (about 1 Hz): cumulative counters as the server reports
-- them (explain takes differences). NULL: the view or column does not exist
-- on this server (pg_stat_wal: PostgreSQL 14+), or it could not be read.
CREATE TABLE pg_stats_sample (
  time_ns             INTEGER PRIMARY KEY,        -- wall clock when the poll was sent
  duration_ns         INTEGER NOT NULL,           -- its round trip
  xact_commit         INTEGER,                    -- pg_stat_database of current_database(): transactions committed (counter)
  xact_rollback       INTEGER,                    -- ... rolled back (counter)
  temp_files          INTEGER,                    -- ... temporary files created by queries (counter)
  temp_bytes          INTEGER,                    -- ... bytes written to them (counter)
  wal_records         INTEGER,                    -- pg_stat_wal: WAL records (counter)
  wal_fpi             INTEGER,                    -- ... full-page images (counter)
  wal_bytes           INTEGER,                    -- ... WAL bytes (counter)
  checkpoints_timed   INTEGER,                    -- pg_stat_bgwriter (17+: pg_stat_checkpointer num_timed) (counter)
  checkpoints_req     INTEGER,                    -- ... requested checkpoints (17+: num_requested) (counter)
  walsenders          INTEGER NOT NULL,           -- pg_stat_replication rows at this poll (pg_replication_sample)
  statements          INTEGER                     -- pg_stat_statements rows stored at this poll (pg_statement_sample); NULL: not read at this poll
);

-- pg_stat_replication at each poll: one row per WAL sender (a standby or a
-- logical subscriber connected to this server).
CREATE TABLE pg_replication_sample (
  time_ns             INTEGER NOT NULL,           -- pg_stats_sample.time_ns of the poll
  pid                 INTEGER NOT NULL,           -- the walsender's pid
  application_name    TEXT,                       -- the standby's name (what synchronous_standby_names lists)
  client_addr         TEXT,                       -- host(client_addr); NULL over a Unix socket
  state               TEXT,                       -- startup, catchup, streaming, backup, stopping
  sync_state          TEXT,                       -- async, potential, sync, quorum
  sync_priority       INTEGER,
  write_lag_ns        INTEGER,                    -- write_lag as ns (NULL: none reported lately)
  flush_lag_ns        INTEGER,                    -- flush_lag as ns
  replay_lag_ns       INTEGER,                    -- replay_lag as ns
  flush_behind_bytes  INTEGER,                    -- pg_current_wal_lsn() − flush_lsn: WAL not yet confirmed flushed (NULL on a standby)
  reply_age_ns        INTEGER,                    -- clock_timestamp() − reply_time: since the standby's last reply
  PRIMARY KEY (time_ns, pid)
) WITHOUT ROWID;

-- pg_stat_statements of the sampled database (when the extension is
-- installed there and preloaded; never required): at the first poll every
-- entry, then every 10 s and at the end the entries whose calls changed —
-- cumulative counters, times in ns (the view's ms × 1e6). An entry first
-- stored after the first snapshot counted from 0 before it.
CREATE TABLE pg_statement_sample (
  time_ns             INTEGER NOT NULL,           -- pg_stats_sample.time_ns of the snapshot
  query_id            INTEGER NOT NULL,           -- queryid
  user_id             INTEGER NOT NULL,           -- userid
  db_id               INTEGER NOT NULL,           -- dbid
  toplevel            INTEGER NOT NULL,           -- 1: top-level statement (0: nested; before 1.9 always 1)
  calls               INTEGER NOT NULL,
  plans               INTEGER,
  total_plan_time_ns  INTEGER,                    -- total_plan_time (pg_stat_statements.track_planning)
  total_exec_time_ns  INTEGER,                    -- total_exec_time
  rows                INTEGER,
  temp_blks_written   INTEGER,                    -- temp file blocks (8 kB) written
  wal_fpi             INTEGER,                    -- full-page images this statement wrote to WAL
  wal_bytes           INTEGER,
  jit_functions       INTEGER,                    -- functions JIT-compiled (1.10+)
  jit_generation_time_ns   INTEGER,
  jit_inlining_time_ns     INTEGER,
  jit_optimization_time_ns INTEGER,
  jit_emission_time_ns     INTEGER,
  PRIMARY KEY (time_ns, query_id, user_id, db_id, toplevel)
) WITHOUT ROWID;

-- The text of each pg_stat_statements entry stored, once per queryid (the
-- first seen, at most 1000 characters).
CREATE TABLE pg_statement_text (
  query_id            INTEGER PRIMARY KEY,
  query               TEXT NOT NULL
);

-- The lock each Lock waiter waits for: per ASH poll that saw a backend in
-- wait_event_type 'Lock', its ungranted pg_locks row (pg_locks WHERE NOT
-- granted, for those pids; a second query, sent only when the poll saw Lock
-- waiters). Join pg_activity_sample on (ash_tick, pid). Absent from files
-- made before it existed; read as no rows.
CREATE TABLE pg_lock_wait (
  ash_tick            INTEGER NOT NULL,           -- the poll (ash_tick.ash_tick)
  pid                 INTEGER NOT NULL,           -- the waiting backend
  locktype            TEXT NOT NULL,              -- relation, tuple, transactionid, virtualxid, advisory, object, page, extend, ...
  mode                TEXT,                       -- the mode asked for, e.g. ShareLock, AccessExclusiveLock
  database_oid        INTEGER,                    -- pg_locks.database (0: a shared object, NULL: not a database object)
  relation_oid        INTEGER,                    -- pg_locks.relation
  relation_name       TEXT,                       -- relation::regclass as text (schema-qualified when not on the search path; the OID when in another database)
  page                INTEGER,
  tuple               INTEGER,
  virtualxid          TEXT,
  transactionid       INTEGER,                    -- pg_locks.transactionid (xid as a number)
  classid             INTEGER,                    -- object / advisory: catalog OID (1262 pg_database: objid 0 is the NOTIFY queue lock), or the advisory key's high half / first int
  objid               INTEGER,                    -- object OID, or the advisory key's low half / second int
  objsubid            INTEGER,                    -- column number; advisory: 1 one bigint key, 2 two int keys
  write_relation_name TEXT,                       -- transactionid waits: a table (relkind r or p, of the poll's database) the waiter holds RowExclusiveLock on, the first by OID — the table it writes, whose row it waits for when it writes one table; NULL otherwise
  PRIMARY KEY (ash_tick, pid, locktype)
) WITHOUT ROWID;

-- explain's results. These two tables end this file, each CREATE TABLE IF
-- NOT EXISTS: explain applies everything from the first of them on again
-- (schema/report_store.cpp), which gives files written before they existed
-- the same tables. Keep them last.

-- Written by `stallscope explain` (all rows replaced on each run of explain):
-- the findings of the whole run, highest score first.
CREATE TABLE IF NOT EXISTS finding (
  rank                INTEGER PRIMARY KEY,        -- 1 = highest score
  kind                TEXT NOT NULL,              -- server_cpu, io_wait, ... (docs/findings.md)
  score               REAL NOT NULL,              -- share of client time it explains, 0-1
  start_ns            INTEGER NOT NULL,           -- wall clock: span where the signal was seen
  end_ns              INTEGER NOT NULL,
  summary             TEXT NOT NULL,              -- one sentence
  evidence            TEXT NOT NULL,              -- JSON object of named numbers (units in the names)
  suggestion          TEXT NOT NULL,
  culprit             TEXT                        -- what to fix, named (root blocker, process, wait channel, setting); NULL: not named
);

-- Written by `stallscope explain` (replaced on each run): windows whose
-- throughput fell or whose latency rose well beyond the run's typical window
-- (robust z = (x - median) / (1.4826 * MAD) over the windows with queries;
-- docs/findings.md gives the thresholds), each explained against the typical windows.
CREATE TABLE IF NOT EXISTS stall (
  stall_id            INTEGER PRIMARY KEY,        -- 1, 2, ... in time order
  window_index        INTEGER NOT NULL,           -- 0-based index of the window in explain's output
  start_ns            INTEGER NOT NULL,           -- wall clock
  end_ns              INTEGER NOT NULL,
  queries             INTEGER NOT NULL,           -- queries sent in the window
  tps                 REAL,                       -- queries / s in the window
  typical_tps         REAL,                       -- median over windows with queries
  latency_mean_ms     REAL,
  typical_latency_mean_ms REAL,                   -- median over windows with queries
  latency_max_ms      REAL,
  tps_z               REAL,                       -- robust z of tps (negative = slower)
  latency_z           REAL,                       -- robust z of the mean latency
  cause               TEXT NOT NULL,              -- io_wait, lock_wait, lwlock_wait, checkpoint, steal, cpu_throttle, runqueue, unexplained
  explanation         TEXT NOT NULL,              -- one sentence: what differs from the typical windows
  evidence            TEXT NOT NULL,              -- JSON object: this window's figures vs typical
  culprit             TEXT                        -- as finding.culprit, for this window
);
