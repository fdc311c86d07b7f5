# lib.sh — shared by the scenario scripts in tools/scenarios/ (sourced, not run).
#
# A scenario sets up its own scratch PostgreSQL, reproduces one cause by
# construction, runs `stallscope run`, then `stallscope explain --json`, and
# checks the verdict with scenario_check: the expected kind ranked first and
# none of the forbidden kinds (io_wait, lock_wait, steal, cpu_throttle, minus
# the expected one) raised.
# Exit status: 0 verdict right, 1 verdict wrong or a step failed, 77 the
# machine cannot run this scenario (reason printed).
# Environment: STALLSCOPE_BIN (default <repo>/build/tools/stallscope),
# SCENARIO_SECONDS (run length, default per scenario), SCENARIO_KEEP_DIR
# (keep the run files there instead of a temp dir).
set -euo pipefail

SCENARIO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${STALLSCOPE_BIN:-$SCENARIO_ROOT/build/tools/stallscope}
SCENARIO_NAME=$(basename "$0")
CONNINFO=""
declare -a SCENARIO_CLEANUP=()

scenario_log() { echo "$SCENARIO_NAME: $*" >&2; }
scenario_fail() { echo "$SCENARIO_NAME: FAIL: $*" >&2; exit 1; }
scenario_skip() { echo "$SCENARIO_NAME: SKIP: $*"; echo "$SCENARIO_NAME: SKIP: $*" >&2; exit 77; }

scenario_on_exit() {
  local rc=$? i
  for (( i=${#SCENARIO_CLEANUP[@]}-1; i>=0; i-- )); do
    eval "${SCENARIO_CLEANUP[$i]}" >/dev/null 2>&1 || true
  done
  exit $rc
}
trap scenario_on_exit EXIT
# Runs CMD (a shell string) when the script exits, last registered first.
scenario_defer() { SCENARIO_CLEANUP+=("$1"); }

[[ -x "$BIN" ]] || scenario_fail "no stallscope binary at $BIN (set STALLSCOPE_BIN or build into build/)"
if [[ -n "${SCENARIO_KEEP_DIR:-}" ]]; then
  WORK=$SCENARIO_KEEP_DIR; mkdir -p "$WORK"
else
  WORK=$(mktemp -d /tmp/stallscope-scenario.XXXXXX)
  scenario_defer "rm -rf '$WORK'"
fi
chmod 0755 "$WORK"

# Starts the scratch server (arguments after -- go to postgres) and sets CONNINFO.
scenario_start_pg() {
  CONNINFO=$("$SCENARIO_ROOT/tools/scratch-postgres" start "$@") || scenario_fail "cannot start scratch postgres"
  scenario_defer "'$SCENARIO_ROOT/tools/scratch-postgres' stop '$CONNINFO'"
  PGDIR=$(sed -n 's/.*host=\([^ ]*\).*/\1/p' <<<"$CONNINFO")
  PGPORT_=$(sed -n 's/.*port=\([0-9]*\).*/\1/p' <<<"$CONNINFO")
  scenario_log "scratch server: $CONNINFO"
}

# Pids of the scratch server's postmaster and all its children.
scenario_pg_pids() {
  local pm
  pm=$(head -n 1 "$PGDIR/data/postmaster.pid")
  echo "$pm"
  pgrep -P "$pm" || true
}

scenario_psql() { psql "$CONNINFO" -q -X -v ON_ERROR_STOP=1 "$@"; }

# Seed 000's table and its singleton select (written to $WORK/seed.sql).
scenario_seed000() {
  scenario_psql <<'SQL'
CREATE TABLE django_site (id serial PRIMARY KEY, domain varchar(100) NOT NULL, name varchar(50) NOT NULL);
INSERT INTO django_site (domain, name) VALUES ('example.com', 'example.com');
SQL
  echo "SELECT * FROM django_site WHERE django_site.domain = 'example.com' ORDER BY django_site.domain;" >"$WORK/seed.sql"
}

# scenario_expect_culprit ERE — before scenario_check: the first finding's
# culprit (report JSON findings[0].culprit) must match this extended regular
# expression (grep -E), e.g. the root blocker's "idle in transaction".
SCENARIO_CULPRIT=""
scenario_expect_culprit() { SCENARIO_CULPRIT=$1; }
# Kinds that must not be raised unless expected (false alarms); a scenario
# may add to the list before scenario_check.
SCENARIO_FORBIDDEN="io_wait lock_wait steal cpu_throttle replication_wait network_stack connection_lost"

# scenario_false_alarms RUN_DB EXPECTED_KIND — the forbidden kinds explain
# raised in $WORK/explain.json, space-separated. A scenario cannot make or
# stop a hypervisor's steal: steal is a false alarm only when the host's
# measured steal (host_sample) was under the finding's 2 % floor of all CPU
# time; above it the finding is true of the host, and a line says so.
scenario_false_alarms() {
  local db=$1 expected=$2 k bad="" steal_pct
  for k in $SCENARIO_FORBIDDEN; do
    [[ "$k" == "$expected" ]] && continue
    jq -e --arg k "$k" 'any(.findings[]; .kind == $k)' "$WORK/explain.json" >/dev/null || continue
    if [[ "$k" == steal ]] && command -v sqlite3 >/dev/null; then
      steal_pct=$(sqlite3 "$db" "SELECT coalesce(round(100.0 * sum(cpu_steal_ns) / sum(cpu_user_ns + cpu_nice_ns + cpu_system_ns + cpu_idle_ns + cpu_iowait_ns + cpu_irq_ns + cpu_softirq_ns + cpu_steal_ns), 2), 0) FROM host_sample" 2>/dev/null || echo 0)
      if awk -v p="$steal_pct" 'BEGIN { exit !(p >= 2) }'; then
        echo "steal: the host's own (${steal_pct}% of all CPU time stolen), not a false alarm" >&2
        continue
      fi
    fi
    bad+=" $k"
  done
  echo "${bad# }"
}

# scenario_check RUN_DB EXPECTED_KIND [explain options…]
# Prints the expected kind and the ranked kinds (and the margin of the first
# over the second), the verdict, the first finding's culprit and whether it
# is the one expected (scenario_expect_culprit), and the false alarms
# (forbidden kinds raised); then fails unless EXPECTED_KIND is first, the
# verdict and the run file's finding table name it, the culprit is named, and
# no forbidden kind is raised. Leaves the JSON in $WORK/explain.json. The
# lines printed are what tools/scenarios/score reads.
scenario_check() {
  local db=$1 expected=$2; shift 2
  local f=$WORK/explain.json
  "$BIN" explain "$db" --json "$@" >"$f" || scenario_fail "explain failed on $db"
  local ranked first verdict_kind culprit stored="" named=no bad="" k
  ranked=$(jq -r '[.findings[] | "\(.kind)=\(.score)"] | join(" ")' "$f")
  first=$(jq -r '.findings[0].kind // "none"' "$f")
  verdict_kind=$(jq -r '.verdict.kind // "none"' "$f")
  culprit=$(jq -r '.findings[0].culprit // empty' "$f")
  bad=$(scenario_false_alarms "$db" "$expected")
  if [[ -n "$SCENARIO_CULPRIT" && -n "$culprit" ]] && grep -qE -- "$SCENARIO_CULPRIT" <<<"$culprit"; then
    named=yes
  fi
  # explain stored the same verdict in the run file.
  command -v sqlite3 >/dev/null && stored=$(sqlite3 "$db" "SELECT kind FROM finding WHERE rank = 1")
  echo "expected: $expected"
  echo "ranked: ${ranked:-none}"
  jq -r 'if (.findings | length) > 1 then "margin: \(((.findings[0].score - .findings[1].score) * 10000 | round) / 10000)" else "margin: \(.findings[0].score // 0)" end' "$f"
  jq -r '.findings[0].summary // empty' "$f" | sed 's/^/first: /'
  echo "verdict kind: $verdict_kind"
  echo "stored: ${stored:--}"
  echo "culprit: ${culprit:--}"
  echo "culprit named: $named (expected /$SCENARIO_CULPRIT/)"
  echo "false alarms: $(wc -w <<<"$bad")${bad:+ ($bad)}"
  [[ "$first" == "$expected" ]] || scenario_fail "expected $expected first, got $first (ranked: $ranked)"
  # The verdict names the same kind (a closed loop's, or a paced run's
  # limiting finding).
  [[ "$verdict_kind" == "$expected" ]] || scenario_fail "the verdict is $verdict_kind, not $expected"
  if command -v sqlite3 >/dev/null; then
    [[ "$stored" == "$expected" ]] || scenario_fail "the finding table's rank 1 is '$stored', not $expected"
  fi
  [[ -z "$bad" ]] || scenario_fail "forbidden kinds raised: $bad"
  [[ -z "$SCENARIO_CULPRIT" || "$named" == yes ]] ||
    scenario_fail "the culprit '${culprit}' does not match /$SCENARIO_CULPRIT/"
  echo "verdict: ok"
}

# scenario_check_accounting — on $WORK/explain.json: the accounting's parts
# add up to its query time (a record file's: its session time) within 0.1 %,
# and no part per query exceeds the mean latency. Prints "parts add up: ok".
scenario_check_accounting() {
  local f=$WORK/explain.json
  jq -e '.accounting != null' "$f" >/dev/null || scenario_fail "no accounting"
  local sum query
  sum=$(jq '[.accounting.parts[].time_ns] | add' "$f")
  query=$(jq '.accounting.query_ns' "$f")
  echo "query time: $query ns; parts: $sum ns"
  jq -e '(([.accounting.parts[].time_ns] | add) - .accounting.query_ns | fabs) <= 0.001 * .accounting.query_ns + 1' "$f" >/dev/null ||
    scenario_fail "the parts ($sum ns) do not add up to the query time ($query ns)"
  jq -e '.run.queries as $q | .run.latency_mean_ms as $l | $q == 0 or all(.accounting.parts[]; .time_ns / $q / 1e6 <= $l * 1.001)' "$f" >/dev/null ||
    scenario_fail "a part per query exceeds the mean latency: $(jq -c '[.accounting.parts[] | {part, time_ns}]' "$f")"
  echo "parts add up: ok"
}

# scenario_check_verdict RUN_DB EXPECTED [explain options…] — EXPECTED is a
# finding kind or "none" (no bottleneck). Prints "verdict kind: …" and the
# reason; checks the accounting (scenario_check_accounting). Leaves the JSON
# in $WORK/explain.json.
scenario_check_verdict() {
  local db=$1 expected=$2; shift 2
  "$BIN" explain "$db" --json "$@" >"$WORK/explain.json" || scenario_fail "explain failed on $db"
  local kind
  kind=$(jq -r '.verdict.kind // "none"' "$WORK/explain.json")
  echo "expected verdict: $expected"
  echo "verdict kind: $kind"
  jq -r '"verdict reason: \(.verdict.reason // "-")", "verdict summary: \(.verdict.summary)"' "$WORK/explain.json"
  echo "ranked: $(jq -r '[.findings[] | "\(.kind)=\(.score)"] | join(" ")' "$WORK/explain.json")"
  local culprit named=n/a
  if [[ "$expected" != none ]]; then
    culprit=$(jq -r '.findings[0].culprit // empty' "$WORK/explain.json")
    named=no
    if [[ -n "$SCENARIO_CULPRIT" && -n "$culprit" ]] && grep -qE -- "$SCENARIO_CULPRIT" <<<"$culprit"; then
      named=yes
    fi
    echo "culprit: ${culprit:--}"
  fi
  echo "culprit named: $named${SCENARIO_CULPRIT:+ (expected /$SCENARIO_CULPRIT/)}"
  local bad
  bad=$(scenario_false_alarms "$db" "$expected")
  echo "false alarms: $(wc -w <<<"$bad")${bad:+ ($bad)}"
  scenario_check_accounting
  [[ "$kind" == "$expected" ]] || scenario_fail "expected verdict $expected, got $kind"
  [[ -z "$SCENARIO_CULPRIT" || "$named" != no ]] ||
    scenario_fail "the culprit '${culprit}' does not match /$SCENARIO_CULPRIT/"
  [[ -z "$bad" ]] || scenario_fail "forbidden kinds raised: $bad"
  echo "verdict: ok"
}

# Runs a command as the scratch server's owner (scratch-postgres runs the
# cluster as an unprivileged user when started by root).
scenario_as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u "$(stat -c %U "$PGDIR/data")" -- "$@"
  else
    "$@"
  fi
}

# scenario_start_standby NAME [postgres -c options…] — a streaming standby of
# the scratch server on this host: pg_basebackup into $WORK/standby-NAME, its
# primary_conninfo naming it NAME (its application_name in
# pg_stat_replication), started on a free port with its socket in that dir.
# Sets STANDBY_DIR and STANDBY_PORT; stopped (and its processes continued,
# should a scenario have stopped its WAL receiver) when the script exits.
scenario_start_standby() {
  local name=$1; shift
  local pgbin=""
  for v in 15 16 17; do
    if [[ -x /usr/lib/postgresql/$v/bin/pg_basebackup ]]; then pgbin=/usr/lib/postgresql/$v/bin; break; fi
  done
  [[ -n "$pgbin" ]] || scenario_skip "no pg_basebackup (postgresql-15)"
  STANDBY_DIR=$WORK/standby-$name
  STANDBY_PGBIN=$pgbin
  mkdir -p "$STANDBY_DIR"
  [[ $(id -u) -eq 0 ]] && chown "$(stat -c %U "$PGDIR/data")" "$STANDBY_DIR"
  scenario_as_owner "$pgbin/pg_basebackup" -h "$PGDIR" -p "$PGPORT_" -U postgres \
    -D "$STANDBY_DIR/data" -X stream -R >"$WORK/basebackup-$name.log" 2>&1 ||
    scenario_fail "cannot pg_basebackup the standby: $(tail -n 3 "$WORK/basebackup-$name.log")"
  STANDBY_PORT=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
  cat >>"$STANDBY_DIR/data/postgresql.auto.conf" <<CONF
primary_conninfo = 'host=$PGDIR port=$PGPORT_ user=postgres application_name=$name'
CONF
  cat >>"$STANDBY_DIR/data/postgresql.conf" <<CONF
port = $STANDBY_PORT
unix_socket_directories = '$STANDBY_DIR'
CONF
  scenario_defer scenario_stop_standby
  local -a opts=()
  [[ $# -gt 0 ]] && opts=(-o "$*")
  scenario_as_owner "$pgbin/pg_ctl" -D "$STANDBY_DIR/data" -l "$STANDBY_DIR/server.log" -w -t 60 \
    "${opts[@]}" start >/dev/null 2>&1 ||
    scenario_fail "cannot start the standby: $(tail -n 3 "$STANDBY_DIR/server.log" 2>/dev/null)"
  scenario_log "standby $name: port $STANDBY_PORT, $STANDBY_DIR"
}

# Continues the standby's processes (a scenario may have stopped its WAL
# receiver) and stops it.
scenario_stop_standby() {
  local pm
  pm=$(head -n 1 "$STANDBY_DIR/data/postmaster.pid" 2>/dev/null) && pkill -CONT -P "$pm"
  scenario_as_owner "$STANDBY_PGBIN/pg_ctl" -D "$STANDBY_DIR/data" -m immediate -w stop
}

# The pid of the standby's WAL receiver (empty when it has none).
scenario_standby_walreceiver() {
  local pm
  pm=$(head -n 1 "$STANDBY_DIR/data/postmaster.pid")
  pgrep -P "$pm" -f walreceiver | head -n 1
}
