#!/usr/bin/env node
// Writes the dev samples (sample-*.json) the page is worked on and tested
// with, from a real `explain --json` file (a row-lock run) plus invented
// timelines, stalls and tables. Hostile strings are planted on purpose.
//   node make-samples.cjs lock.json
'use strict';
const fs = require('fs');
const path = require('path');

const base = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
delete base.windows;
const clone = (o) => JSON.parse(JSON.stringify(o));
const XSS = '<img src=x onerror=alert(1)>';
const XSS2 = '</script><script>alert(1)</script>';

// Deterministic noise.
let seed = 7;
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);

const START = base.run.query_start_ns;  // 1796157813191007417
const BIN = 100000000;                  // 100 ms
const BINS = 61;
// One invented stall: +3.0 s .. +4.0 s.
const stallStart = START + 3000000000, stallEnd = START + 4000000000;
const inStall = (i) => i >= 30 && i < 40;
const arr = (f) => Array.from({length: BINS}, (_, i) => f(i));
const r1 = (x) => Math.round(x * 10) / 10;

function stall(extra) {
  return Object.assign({
    window_index: 3, start_ns: stallStart, end_ns: stallEnd, queries: 96,
    tps: 96.0, typical_tps: 401.0, latency_mean_ms: 83.2, typical_latency_mean_ms: 19.6,
    latency_max_ms: 110.6, tps_z: -9.4, latency_z: 12.1, cause: 'lock_wait',
    explanation: 'Throughput fell to 96 q/s against a typical 401 q/s: backends waited on ' +
      'Lock:transactionid for 93% of the window\'s service time (typical 81%); the root of ' +
      'the blocking chain was pid 4242 (idle in transaction, ' + XSS + ').',
    evidence: {lock_wait_share: 0.93, typical_lock_wait_share: 0.81, top_wait_event: 'Lock:transactionid'},
    culprit: 'pid 4242 idle in transaction for 3.1 s (application_name "' + XSS2 + '")',
  }, extra || {});
}

function charts(opts) {
  const c = [];
  const host = opts.hosts;
  if (opts.queries) {
    c.push({id: 'throughput', title: 'Throughput', unit: 'queries/s', y_log: false, stacked: false,
      series: [{label: 'answered', values: arr((i) => (i === 60 ? null : r1((inStall(i) ? 96 : 395) + rnd() * 20)))}],
      lines: opts.rate ? [{label: 'target rate', value: opts.rate}] : [], note: ''});
    c.push({id: 'latency', title: 'Latency', unit: 'ms', y_log: true, stacked: false,
      series: [
        {label: 'p50', values: arr((i) => r1((inStall(i) ? 70 : 16) + rnd() * 4))},
        {label: 'p99', values: arr((i) => r1((inStall(i) ? 110 : 65) + rnd() * 10))}],
      lines: [], note: 'per 100 ms bin, of the queries answered in it'});
    if (opts.rate) {
      c.push({id: 'schedule_lag', title: 'Schedule lag', unit: 'ms', y_log: true, stacked: false,
        series: [{label: 'mean', values: arr((i) => (inStall(i) ? r1(40 + rnd() * 30) : (i % 7 ? 0 : 0.2)))},
                 {label: 'max', values: arr((i) => (inStall(i) ? r1(90 + rnd() * 30) : r1(0.5 + rnd())))}],
        lines: [], note: 'how late queries were sent against the -R schedule'});
    }
  }
  if (opts.ash !== false) {
    c.push({id: 'aas', title: 'Database load', unit: 'average active sessions', y_log: false, stacked: true,
      series: [
        {label: 'CPU', values: arr(() => r1(0.2 + rnd() * 0.3))},
        {label: 'Lock', values: arr((i) => r1((inStall(i) ? 7.5 : 6) + rnd()))},
        {label: 'LWLock', values: arr(() => r1(rnd() * 0.4))},
        {label: 'IO', values: arr((i) => (i % 9 ? 0 : 0.1))},
        {label: 'Timeout', values: arr(() => r1(0.7 + rnd() * 0.3))},
        {label: 'Client', values: arr(() => r1(rnd() * 0.2))}],
      lines: [{label: 'cores', value: opts.cores}], note: 'ASH samples of pg_stat_activity, by wait class'});
  }
  for (const h of host) {
    c.push({id: 'host_cpu:' + h, title: 'Host CPU — ' + h, unit: '%', y_log: false, stacked: true,
      series: [
        {label: 'user', values: arr((i) => (i === 20 ? null : r1(8 + rnd() * 4)))},
        {label: 'system', values: arr((i) => (i === 20 ? null : r1(3 + rnd() * 2)))},
        {label: 'iowait', values: arr((i) => (i === 20 ? null : r1(rnd() * 2)))},
        {label: 'irq+softirq', values: arr((i) => (i === 20 ? null : r1(rnd())))},
        {label: 'steal', values: arr((i) => (i === 20 ? null : (inStall(i) ? 4 : 0)))},
        {label: 'idle', values: arr((i) => (i === 20 ? null : r1(80 - rnd() * 4)))}],
      lines: [], note: i => ''});
    c[c.length - 1].note = 'a gap: no host sample in that bin';
    c.push({id: 'tasks:' + h, title: 'Tasks — ' + h, unit: 'tasks', y_log: false, stacked: false,
      series: [
        {label: 'runnable (mean)', values: arr(() => r1(1 + rnd() * 2))},
        {label: 'runnable (max)', values: arr(() => Math.round(2 + rnd() * 3))},
        {label: 'D state (mean)', values: arr((i) => (inStall(i) ? 1 : 0))},
        {label: 'D state (max)', values: arr((i) => (inStall(i) ? 2 : (i % 11 ? 0 : 1)))}],
      lines: [{label: 'cores', value: opts.cores}], note: ''});
    c.push({id: 'psi:' + h, title: 'Pressure (PSI) — ' + h, unit: '% of time', y_log: false, stacked: false,
      series: [
        {label: 'cpu some', values: arr(() => r1(5 + rnd() * 10))},
        {label: 'io some', values: arr((i) => (inStall(i) ? r1(20 + rnd() * 10) : r1(rnd() * 2)))},
        {label: 'memory some', values: arr(() => 0)}],
      lines: [], note: ''});
    c.push({id: 'process_cpu:' + h, title: 'Process CPU — ' + h, unit: 'cores', y_log: false, stacked: true,
      series: [
        {label: 'postgres', values: arr(() => r1(0.15 + rnd() * 0.05))},
        {label: 'stallscope', values: arr(() => Math.round((0.02 + rnd() * 0.01) * 1000) / 1000)},
        {label: XSS, values: arr(() => Math.round(rnd() * 0.02 * 1000) / 1000)}],
      lines: [{label: 'cores', value: opts.cores}], note: ''});
  }
  return c;
}

function tables(opts) {
  const procs = [
    {host: 'vm', pid: 4242, comm: 'postgres', cmdline: 'postgres: bench bench 127.0.0.1(50312) idle in transaction',
     cpu_s: 0.41, cores: 0.068, run_delay_s: 0.05, d_state_s: 0.0, off_cpu_s: 0.05, top_wchan: 'do_epoll_wait'},
    {host: 'vm', pid: 4301, comm: 'postgres', cmdline: 'postgres: bench bench 127.0.0.1(50320) UPDATE waiting',
     cpu_s: 0.12, cores: 0.02, run_delay_s: 0.21, d_state_s: 0.1, off_cpu_s: 0.31, top_wchan: 'futex_wait_queue'},
    {host: 'vm', pid: 900, comm: XSS, cmdline: XSS2 + ' --flag ' + 'x'.repeat(200),
     cpu_s: 0.09, cores: 0.015, run_delay_s: 0.01, d_state_s: 0.0, off_cpu_s: 0.01, top_wchan: XSS},
    {host: 'vm', pid: 3999, comm: 'stallscope', cmdline: 'stallscope run --pg host=/tmp -c 8 -j 2 -T 6',
     cpu_s: 0.06, cores: 0.01, run_delay_s: 0.056, d_state_s: 0.0, off_cpu_s: 0.056, top_wchan: null},
    {host: 'vm', pid: 612, comm: 'jbd2/vda1-8', cmdline: '', cpu_s: 0.0, cores: 0.0,
     run_delay_s: 0.0, d_state_s: 0.2, off_cpu_s: 0.2, top_wchan: 'jbd2_journal_commit_transaction'},
  ];
  for (const p of procs) p.host = opts.hosts[0];
  const t = {
    processes: opts.hosts.length > 1
      ? procs.concat(procs.slice(0, 2).map((p) => Object.assign({}, p, {host: opts.hosts[1], pid: p.pid + 10000})))
      : procs,
    processes_note: '',
    wait_events: opts.ash === false ? [] : [
      {wait_event_type: 'Lock', wait_event: 'transactionid', samples: 368, aas: 6.1, share: 0.82},
      {wait_event_type: 'Timeout', wait_event: 'PgSleep', samples: 55, aas: 0.91, share: 0.12},
      {wait_event_type: 'LWLock', wait_event: 'LockManager', samples: 14, aas: 0.23, share: 0.03},
      {wait_event_type: 'Lock', wait_event: XSS, samples: 1, aas: 0.02, share: 0.002}],
    wait_events_note: opts.ash === false ? 'no ASH in this file: recorded without --pg' : '',
    sql: opts.queries === false || opts.ash === false ? [] : [
      {query_id: 812734561234, query: 'UPDATE hot SET n = n + 1 WHERE id = 1', samples: 400,
       db_time_s: 40.0, share: 0.9, cpu_share: 0.01, top_wait: 'Lock:transactionid'},
      {query_id: null, query: 'SELECT pg_sleep(0.002) /* ' + XSS2 + ' */', samples: 55,
       db_time_s: 5.5, share: 0.1, cpu_share: 0.0, top_wait: 'Timeout:PgSleep'}],
    sql_note: opts.ash === false ? 'no ASH in this file: recorded without --pg' : '',
    lock_chains: opts.ash === false ? null : {
      culprit: base.findings[0].culprit, turnstile: true, hot_lock: 'tuple lock',
      distinct_roots: 8, waiter_samples: 300, polls: 60,
      root: {pid: 4242, state: 'idle in transaction', backend_type: 'client backend',
             application_name: XSS, query: 'UPDATE hot SET n = n + 1 WHERE id = 1', xact_age_s: 3.1},
      chain: [
        {pid: 4301, state: 'active', query: 'UPDATE hot SET n = n + 1 WHERE id = 1', locktype: 'transactionid',
         mode: 'ShareLock', target: 'transaction 1234'},
        {pid: 4302, state: 'active', query: XSS2, locktype: 'tuple', mode: 'ExclusiveLock',
         target: 'relation hot, page 0, tuple 1'}]},
  };
  return t;
}

function write(name, obj) {
  // Arrays of numbers on one line each: the samples stay short to read.
  const text = JSON.stringify(obj, null, 1)
    .replace(/\[\n\s*((?:-?[\d.e+]+|null)(?:,\n\s*(?:-?[\d.e+]+|null))*)\n\s*\]/g,
             (m, body) => '[' + body.replace(/,\n\s*/g, ', ') + ']');
  fs.writeFileSync(path.join(__dirname, name), text + '\n');
}

// 1. Closed-loop run with a stall and a lock_wait finding.
const closed = {
  title: 'lock.db', generated_by: 'stallscope 0.1.0',
  files: {run: 'lock.db', server: null, baseline: null},
  facts: {command_line: "stallscope run --pg 'host=/tmp dbname=bench' -c 8 -j 2 -T 6 -f lock.sql -o lock.db " + XSS,
          rate: {mode: 'closed loop', target_tps: null}, hosts: [{role: '', host: 'vm', kernel: base.run.kernel, cores: 2}]},
  report: clone(base),
  timeline: {start_ns: START, bin_ns: BIN, bins: BINS, charts: charts({queries: true, hosts: ['vm'], cores: 2})},
  tables: tables({hosts: ['vm']}),
  baseline: null,
};
closed.report.stalls = [stall(), stall({window_index: 5, start_ns: START + 5000000000, end_ns: START + 5400000000,
  cause: 'unexplained', culprit: null, tps: 300, queries: 120,
  explanation: 'Part of the stall at +3 s (lock_wait): its slowest query was sent before that stall\'s window ended.',
  evidence: {}})];
closed.report.findings[0].culprit += ' ' + XSS;
closed.report.notes.push('A hostile note: ' + XSS2);
write('sample-closed.json', closed);

// 2. Client + server pair, open loop (-R 500): two hosts.
const pair = clone(closed);
pair.title = 'client.db + server.db';
pair.files = {run: 'client.db', server: 'server.db', baseline: null};
pair.facts.rate = {mode: "fixed", target_tps: 500};
pair.facts.command_line = 'stallscope run --pg host=db1 -c 8 -j 2 -R 500 -T 6 -o client.db';
pair.facts.hosts = [{role: 'client', host: 'app1', kernel: '6.1.0-18-amd64', cores: 4},
                    {role: 'server', host: 'db1', kernel: base.run.kernel, cores: 2}];
pair.report.run.host = 'app1';
pair.report.hosts = [
  {role: 'client', host: 'app1', cores: 4, cpu_busy_pct: 12.5, cpu_iowait_pct: 0.1, cpu_steal_pct: 0.0},
  {role: 'server', host: 'db1', cores: 2, cpu_busy_pct: 31.0, cpu_iowait_pct: 1.5, cpu_steal_pct: 2.0}];
pair.report.clock = {estimates: 12, applied: true, offset_ns: 1250000, uncertainty_ns: 90000,
                     offset_min_ns: 1200000, offset_max_ns: 1300000};
{
  const parts = pair.report.accounting.parts;
  const hostOf = {driver_cpu: 'client', run_queue: 'server', remainder: null};
  for (const p of parts) p.host = p.part in hostOf ? hostOf[p.part] : 'server';
  // Round trips through the network: a client_run_queue and a schedule_lag part.
  parts.splice(1, 0, {host: 'client', part: 'client_run_queue', query_time_share: 0.004, time_ns: 192000000});
  parts.push({host: null, part: 'schedule_lag', query_time_share: 0.0, time_ns: 310000000});
  parts[parts.length - 2] = {host: null, part: 'remainder', query_time_share: 0.02, time_ns: 961000000};
}
pair.timeline.charts = charts({queries: true, hosts: ['app1', 'db1'], cores: 2, rate: 500});
pair.tables = tables({hosts: ['db1', 'app1']});
write('sample-pair.json', pair);

// 3. A record file without queries or sessions: host accounting only, no ASH.
const rec = {
  title: 'rec.db', generated_by: 'stallscope 0.1.0',
  files: {run: 'rec.db', server: null, baseline: null},
  facts: {command_line: 'stallscope record -T 6 -o rec.db -- make -j2', rate: null,
          hosts: [{role: '', host: 'builder', kernel: '6.1.0-18-amd64', cores: 2}]},
  report: {
    run: {mode: 'record', status: 'complete', host: 'builder', kernel: '6.1.0-18-amd64', cores: 2,
          start_ns: START, end_ns: START + 6100000000, duration_ns: 6100000000, hz: 10.0,
          queries: 0, clients: null, threads: null, protocol: null, tps: null, server_version: null,
          latency_mean_ms: null, latency_p50_ms: null, latency_p99_ms: null},
    accounting: null,
    host_accounting: {cores: 2, wall_ns: 6100000000, cpu_ns: 12200000000, parts: [
      {part: 'process_cpu:cc1plus (pid 5120)', time_ns: 5100000000, share: 0.418},
      {part: 'process_cpu:' + XSS + ' (pid 66)', time_ns: 900000000, share: 0.074},
      {part: 'other_cpu', time_ns: 1200000000, share: 0.098},
      {part: 'iowait', time_ns: 400000000, share: 0.033},
      {part: 'steal', time_ns: 0, share: 0.0},
      {part: 'idle', time_ns: 4600000000, share: 0.377}]},
    attribution: {method: 'none', queries: 0, joined_queries: 0, reason: 'no queries in this file',
                  backend_cpu_outside_ns: 0, ash_samples_outside: 0},
    verdict: {kind: null, reason: 'no queries: nothing to account query time to', summary:
              'No queries in this file; the host was 62% busy, most of it cc1plus.'},
    findings: [], stalls: [],
    notes: ['No ASH: the file was recorded without --pg, so server waits are not seen.',
            'Host state is sampled every 100.0 ms.'],
  },
  timeline: {start_ns: START, bin_ns: BIN, bins: BINS,
             charts: charts({queries: false, ash: false, hosts: ['builder'], cores: 2})},
  tables: tables({hosts: ['builder'], ash: false, queries: false}),
  baseline: null,
};
rec.tables.lock_chains = null;
write('sample-record.json', rec);

// 4. The closed-loop run against a baseline (a run without the hot row).
const withBase = clone(closed);
withBase.title = 'lock.db vs spread.db';
withBase.files.baseline = 'spread.db';
const bRep = {run: clone(base.run), accounting: clone(base.accounting), verdict: {kind: 'cpu', reason: null,
  summary: 'The server\'s CPU was the largest part of query time (48%).'}, findings: []};
Object.assign(bRep.run, {tps: 1890.4, queries: 11342, latency_mean_ms: 4.2, latency_p50_ms: 3.9, latency_p99_ms: 9.8});
bRep.accounting.parts = [
  {host: null, part: 'driver_cpu', query_time_share: 0.06, time_ns: 2900000000},
  {host: null, part: 'server_cpu', query_time_share: 0.48, time_ns: 23000000000},
  {host: null, part: 'server_wait:Lock', query_time_share: 0.02, time_ns: 960000000},
  {host: null, part: 'server_wait:Timeout', query_time_share: 0.30, time_ns: 14400000000},
  {host: null, part: 'run_queue', query_time_share: 0.12, time_ns: 5770000000},
  {host: null, part: 'remainder', query_time_share: 0.02, time_ns: 960000000}];
withBase.baseline = {
  title: 'spread.db', report: bRep,
  comparison: {summary: 'This run answered 79% fewer queries per second than spread.db (396 against 1890 q/s).',
               tps_ratio: 0.2096, tps_change_pct: -79.0,
               run: {label: 'lock.db', tps: 396.2}, baseline: {label: 'spread.db', tps: 1890.4}},
  differences: ['server_wait:Lock rose from 2% to 81% of query time',
                'server_cpu fell from 48% to 2% of query time',
                'run_queue fell from 12% to 2% of query time ' + XSS],
};
write('sample-baseline.json', withBase);

// What the browser test expects of each sample's page.
const hostCharts = (h) => ['host_cpu:' + h, 'tasks:' + h, 'psi:' + h, 'process_cpu:' + h];
write('sample-closed.expect.json', {
  charts: ['throughput', 'latency', 'aas'].concat(hostCharts('vm')), findings: ['lock_wait', 'kernel_wait'],
  texts: ['<img src=x onerror=alert(1)>', '</script><script>alert(1)</script>', 'culprit:',
          'What this report could not see / caveats', 'Time accounting'],
  stall_click: true});
write('sample-pair.expect.json', {
  charts: ['throughput', 'latency', 'schedule_lag', 'aas'].concat(hostCharts('app1'), hostCharts('db1')),
  findings: ['lock_wait'], texts: ['client (app1)', 'server (db1)', 'fixed rate 500 tps (-R)'], stall_click: true});
write('sample-record.expect.json', {
  charts: hostCharts('builder'), findings: [],
  texts: ['No bottleneck found', 'Host CPU time', 'no ASH in this file', '<img src=x onerror=alert(1)>']});
write('sample-baseline.expect.json', {
  charts: ['throughput', 'aas'], findings: ['lock_wait'],
  texts: ['Comparison with the baseline', 'server_wait:Lock rose from 2% to 81% of query time', 'spread.db (baseline)'],
  stall_click: true});
