// stallscope report page: turns the JSON embedded in #stallscope-data into
// the report. Plain ES2020, no modules; runs after uPlot's IIFE build.
//
// Every string in the data is untrusted (process names, command lines, SQL,
// application names, wait channels...): the DOM is built with createElement
// and textContent only — no HTML parsing of any string, anywhere.
(function () {
  'use strict';

  const errors = [];
  const charts = [];        // {u, el, spec}
  let data = null;
  let stalls = [];
  let syncingScale = false;
  let stallPanel = null;

  // ---------- DOM helpers (text only) ----------
  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const k of Object.keys(attrs)) {
        const v = attrs[k];
        if (v === null || v === undefined || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = String(v);
        else if (k.startsWith('data-')) e.setAttribute(k, String(v));
        else if (k === 'title' || k === 'colspan' || k === 'type' || k === 'tabindex') e.setAttribute(k, String(v));
        else if (k === 'style') e.setAttribute('style', String(v));
        else throw new Error('el(): attribute not allowed: ' + k);
      }
    }
    if (children) {
      for (const c of children) {
        if (c === null || c === undefined || c === false) continue;
        e.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
      }
    }
    return e;
  }
  const txt = (s) => document.createTextNode(s === null || s === undefined ? '' : String(s));
  const isNum = (v) => typeof v === 'number' && isFinite(v);

  // ---------- number / time formatting ----------
  function fmtNum(v, digits) {
    if (!isNum(v)) return '—';
    if (digits === undefined) {
      const a = Math.abs(v);
      digits = Number.isInteger(v) || a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : a >= 0.01 ? 3 : a === 0 ? 0 : 4;
    }
    return v.toLocaleString('en-US', {minimumFractionDigits: digits, maximumFractionDigits: digits});
  }
  const fmtPct = (share, d) => (isNum(share) ? fmtNum(share * 100, d === undefined ? 1 : d) + ' %' : '—');
  function fmtDurNs(ns) {
    if (!isNum(ns)) return '—';
    const s = ns / 1e9;
    if (s >= 3600) return fmtNum(s / 3600, 2) + ' h';
    if (s >= 60) return fmtNum(s / 60, 1) + ' min';
    if (s >= 1) return fmtNum(s, 2) + ' s';
    return fmtNum(ns / 1e6, 1) + ' ms';
  }
  const pad2 = (n) => (n < 10 ? '0' : '') + n;
  // Clock time in UTC: the page reads the same on every machine.
  function clockUTC(sec, withMs) {
    const d = new Date(sec * 1000);
    let s = pad2(d.getUTCHours()) + ':' + pad2(d.getUTCMinutes()) + ':' + pad2(d.getUTCSeconds());
    if (withMs) s += '.' + String(d.getUTCMilliseconds()).padStart(3, '0');
    return s;
  }
  function dateUTC(sec) {
    const d = new Date(sec * 1000);
    return d.getUTCFullYear() + '-' + pad2(d.getUTCMonth() + 1) + '-' + pad2(d.getUTCDate());
  }

  // ---------- colours ----------
  const NAMED = {
    // wait classes + CPU (ASH)
    cpu: '#3a9a3a', io: '#2f6fd0', lock: '#d62728', lwlock: '#ff8c1a', ipc: '#8e5bc4',
    client: '#8c8c8c', timeout: '#c9a227', activity: '#b0b0b0', bufferpin: '#17a2b8',
    extension: '#7f6a4d', idle: '#dcdcdc',
    // host CPU
    user: '#3a9a3a', system: '#96c94a', iowait: '#2f6fd0', 'irq+softirq': '#e5b700',
    irq: '#e5b700', softirq: '#d8a100', steal: '#8b1a1a', nice: '#6bbf8e', other_cpu: '#96c94a',
    // accounting families
    driver_cpu: '#6d8ebf', path_cpu: '#56a0a0', path_wait: '#9bc7c7', server_cpu: '#3a9a3a',
    server_wait: '#d62728', server_d_state: '#7a4b2a', kernel_wait: '#c97b3a',
    run_queue: '#e5b700', client_run_queue: '#f0d860', schedule_lag: '#b05fb0',
    remainder: '#c8c8c8', unaccounted: '#c8c8c8', process_cpu: '#3a9a3a',
    // common series
    answered: '#2f6fd0', p50: '#2f6fd0', p99: '#d62728', mean: '#2f6fd0', max: '#d62728',
    'runnable (mean)': '#e5b700', 'runnable (max)': '#b38f00', 'd state (mean)': '#7a4b2a',
    'd state (max)': '#b07850', postgres: '#336791', stallscope: '#8c8c8c',
  };
  // Wait classes inside accounting parts (server_wait:Lock): shade by class.
  const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#9467bd', '#8c564b', '#e377c2', '#17becf',
                   '#bcbd22', '#7f7f7f', '#aec7e8', '#ffbb78', '#98df8a', '#c5b0d5', '#c49c94'];
  function hashIdx(s, n) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return (h >>> 0) % n;
  }
  function colourFor(label) {
    const k = String(label).toLowerCase();
    if (NAMED[k]) return NAMED[k];
    if (k.startsWith('cpu ')) return NAMED.cpu;
    if (k.startsWith('io ')) return NAMED.io;
    if (k.startsWith('memory')) return '#8e5bc4';
    return PALETTE[hashIdx(k, PALETTE.length)];
  }
  function partFamily(name) {
    const i = name.indexOf(':');
    return i < 0 ? name : name.slice(0, i);
  }
  // An accounting part's colour: the family's, and for server_wait:<class>
  // the wait class's own colour, so the bar reads like the load chart.
  // Further sub-parts of one family (server_d_state:a, server_d_state:b)
  // get lighter shades of the family's colour, so neighbours stay apart.
  const subIndex = new Map();
  function partColour(name) {
    const fam = partFamily(name);
    const sub = name.slice(fam.length + 1).toLowerCase();
    if (fam === 'server_wait' && NAMED[sub]) return NAMED[sub];
    if (fam === 'process_cpu') return PALETTE[hashIdx(sub, PALETTE.length)];
    const base = NAMED[fam] || PALETTE[hashIdx(fam, PALETTE.length)];
    if (!sub) return base;
    if (!subIndex.has(fam)) subIndex.set(fam, []);
    const subs = subIndex.get(fam);
    if (!subs.includes(sub)) subs.push(sub);
    return lighten(base, Math.min(0.6, subs.indexOf(sub) * 0.22));
  }
  function lighten(hex, f) {
    const m = /^#([0-9a-f]{6})$/i.exec(hex);
    if (!m || !f) return hex;
    const n = parseInt(m[1], 16);
    const ch = (v) => Math.round(v + (255 - v) * f).toString(16).padStart(2, '0');
    return '#' + ch(n >> 16) + ch((n >> 8) & 255) + ch(n & 255);
  }
  function isLight(hex) {
    const m = /^#([0-9a-f]{6})$/i.exec(hex);
    if (!m) return false;
    const n = parseInt(m[1], 16);
    return 0.299 * (n >> 16) + 0.587 * ((n >> 8) & 255) + 0.114 * (n & 255) > 170;
  }
  function alpha(hex, a) {
    const m = /^#([0-9a-f]{6})$/i.exec(hex);
    if (!m) return hex;
    const n = parseInt(m[1], 16);
    return 'rgba(' + (n >> 16) + ',' + ((n >> 8) & 255) + ',' + (n & 255) + ',' + a + ')';
  }

  // ---------- sections ----------
  function section(id, title, sub) {
    const s = el('section', {class: 'block', 'data-section': id});
    s.appendChild(el('h2', {text: title}));
    if (sub) s.appendChild(el('p', {class: 'sub', text: sub}));
    return s;
  }
  function guard(name, fn) {
    try {
      return fn();
    } catch (e) {
      fail(name + ': ' + (e && e.message ? e.message : String(e)), e);
      return null;
    }
  }
  function fail(msg, e) {
    errors.push(msg);
    if (e && e.stack && window.console) console.warn(e.stack);  // not console.error: the test reads errors
    let box = document.getElementById('render-error');
    if (!box) {
      box = el('div', {class: 'error-box', 'data-role': 'error'});
      box.id = 'render-error';
      box.appendChild(el('strong', {text: 'The report could not be drawn completely:'}));
      const app = document.getElementById('app') || document.body;
      app.insertBefore(box, app.firstChild);
    }
    box.appendChild(el('div', {text: msg}));
    document.body.dataset.error = errors[0];
  }

  const rep = () => data.report || {};
  const run = () => rep().run || {};

  // 1. Header: title, verdict, run facts.
  function renderHeader(app) {
    const r = rep(), ru = run(), facts = data.facts || {};
    const head = el('header', {class: 'head'});
    const gen = data.generated_by ? 'generated by ' + data.generated_by : '';
    head.appendChild(el('div', {class: 'brand'}, [el('span', {class: 'logo', text: 'stallscope report'}), el('span', {class: 'gen', text: gen})]));
    head.appendChild(el('h1', {text: data.title || (data.files && data.files.run) || 'run'}));

    const v = r.verdict || {};
    // As explain's verdict line: a kind; else "no bottleneck" (paced), "unknown"
    // (nothing measured splits the query time) or "none found".
    const unknown = !v.kind && (v.reason === 'cannot_account' || v.reason === 'no_queries');
    const kind = v.kind || (v.reason === 'paced' ? 'no bottleneck' : v.reason === 'cannot_account' ? 'unknown' : 'none found');
    const verdict = el('div', {class: 'verdict' + (v.kind ? ' has-kind' : unknown ? ' unknown' : ' none'), 'data-verdict': kind}, [
      el('div', {class: 'verdict-kind', text: kind}),
      el('div', {class: 'verdict-summary', text: v.summary || '(no summary)'}),
    ]);
    if (v.reason) verdict.appendChild(el('div', {class: 'verdict-reason', text: v.reason}));
    head.appendChild(verdict);

    const dl = el('dl', {class: 'facts'});
    const add = (k, val, cls) => {
      if (val === null || val === undefined || val === '') return;
      dl.appendChild(el('div', {class: 'fact' + (cls ? ' ' + cls : '')}, [el('dt', {text: k}), el('dd', {text: val})]));
    };
    const hosts = facts.hosts && facts.hosts.length ? facts.hosts : [{role: '', host: ru.host, kernel: ru.kernel, cores: ru.cores}];
    for (const h of hosts) {
      const label = h.role ? 'host (' + h.role + ')' : 'host';
      add(label, (h.host || '?') + (isNum(h.cores) ? ' · ' + h.cores + ' cores' : '') + (h.kernel ? ' · ' + h.kernel : ''), 'span2');
    }
    add('server', ru.server_version);
    add('mode', ru.mode);
    add('status', [ru.status, ru.end_reason].filter(Boolean).join(' — '));
    add('duration', isNum(ru.duration_ns) ? fmtDurNs(ru.duration_ns) : null);
    if (isNum(ru.start_ns)) add('started', dateUTC(ru.start_ns / 1e9) + ' ' + clockUTC(ru.start_ns / 1e9) + ' UTC');
    add('clients', isNum(ru.clients) ? String(ru.clients) : null);
    add('threads', isNum(ru.threads) ? String(ru.threads) : null);
    add('protocol', ru.protocol);
    const rate = facts.rate || {};
    add('rate', rate.mode === 'fixed' ? 'fixed rate' + (isNum(rate.target_tps) ? ' ' + fmtNum(rate.target_tps) + ' tps (-R)' : ' (-R)')
      : rate.mode === 'closed loop' ? 'closed loop (no -R)' : null);
    add('queries', isNum(ru.queries) ? fmtNum(ru.queries, 0) + (ru.errors ? ' (' + fmtNum(ru.errors, 0) + ' errors)' : '') : null);
    add('tps', isNum(ru.tps) ? fmtNum(ru.tps, 1) : null);
    if (isNum(ru.latency_mean_ms)) {
      add('latency', 'mean ' + fmtNum(ru.latency_mean_ms) + ' · p50 ' + fmtNum(ru.latency_p50_ms) +
          ' · p99 ' + fmtNum(ru.latency_p99_ms) + ' ms');
    }
    if (isNum(ru.lag_mean_ms)) add('schedule lag', 'mean ' + fmtNum(ru.lag_mean_ms) + ' · max ' + fmtNum(ru.lag_max_ms) + ' ms');
    add('sampling', isNum(ru.hz) ? fmtNum(ru.hz) + ' Hz' : null);
    const files = data.files || {};
    add('files', [files.run, files.server, files.baseline ? 'baseline ' + files.baseline : null].filter(Boolean).join(' · '));
    add('command line', facts.command_line, 'wide mono');
    head.appendChild(dl);
    app.appendChild(head);
  }

  // 2. Time accounting: one stacked bar per host.
  function renderAccounting(app) {
    const r = rep(), ru = run();
    let parts, note, perQuery = true;
    if (r.accounting && Array.isArray(r.accounting.parts)) {
      parts = r.accounting.parts.map((p) => ({
        name: String(p.name !== undefined ? p.name : p.part),
        time_ns: p.time_ns, share: p.share !== undefined ? p.share : p.query_time_share,
        host: p.host || '',
      }));
      note = 'Where the clients\' query time went, as shares of it' +
             (isNum(ru.queries) && ru.queries > 0 ? ', and in ms per query' : '') + '.';
    } else if (r.host_accounting && Array.isArray(r.host_accounting.parts)) {
      parts = r.host_accounting.parts.map((p) => ({
        name: String(p.name !== undefined ? p.name : p.part), time_ns: p.time_ns, share: p.share, host: '',
      }));
      perQuery = false;
      note = 'No query time to account in this file (no queries or sessions): this is the host\'s CPU time ' +
             (isNum(r.host_accounting.cores) ? 'over ' + r.host_accounting.cores + ' cores ' : '') + 'instead.';
    } else {
      const s = section('accounting', 'Time accounting');
      s.appendChild(el('p', {class: 'empty', text: 'No time accounting in this file.'}));
      app.appendChild(s);
      return;
    }
    const s = section('accounting', perQuery ? 'Time accounting' : 'Host CPU time', note);
    const queries = isNum(ru.queries) && ru.queries > 0 ? ru.queries : null;

    // Group by host. For a pair, the parts with no host (remainder, schedule
    // lag) get a bar of their own.
    const hostNames = [];
    for (const p of parts) if (!hostNames.includes(p.host)) hostNames.push(p.host);
    const pair = hostNames.some((h) => h === 'client' || h === 'server');
    const order = pair ? ['client', 'server', ''].filter((h) => hostNames.includes(h)).concat(hostNames.filter((h) => !['client', 'server', ''].includes(h))) : [''];
    const hostLabel = (role) => {
      const hs = (data.facts && data.facts.hosts) || [];
      const h = hs.find((x) => x.role === role);
      if (role === '') return pair ? 'neither host' : (hs[0] && hs[0].host) || ru.host || 'host';
      return role + (h && h.host ? ' (' + h.host + ')' : '');
    };
    if (pair) s.appendChild(el('p', {class: 'sub', text: 'One bar per host; the parts that belong to neither host (round trips, remainder, schedule lag) are in a bar of their own. Bar widths are shares of the whole query time, so the bars add up to 100 %.'}));

    for (const h of order) {
      const mine = pair ? parts.filter((p) => p.host === h) : parts;
      if (!mine.length) continue;
      const total = mine.reduce((a, p) => a + (isNum(p.share) ? p.share : 0), 0);
      const row = el('div', {class: 'acc-row', 'data-host': h || 'all'});
      row.appendChild(el('div', {class: 'acc-host', text: hostLabel(h)}, []));
      const bar = el('div', {class: 'acc-bar'});
      for (const p of mine) {
        if (!isNum(p.share) || p.share <= 0) continue;
        const seg = el('div', {class: 'acc-seg', title: p.name + ': ' + fmtPct(p.share) + (queries ? ', ' + fmtNum(p.time_ns / queries / 1e6) + ' ms/query' : '')});
        seg.style.width = (p.share * 100).toFixed(3) + '%';
        seg.style.background = partColour(p.name);
        if (p.share >= 0.06) seg.appendChild(el('span', {class: isLight(partColour(p.name)) ? 'on-light' : '', text: p.name + ' ' + fmtPct(p.share, 0)}));
        bar.appendChild(seg);
      }
      row.appendChild(bar);
      row.appendChild(el('div', {class: 'acc-total', text: fmtPct(total)}));
      s.appendChild(row);
    }

    // Legend: every part, its share and ms per query.
    const t = el('table', {class: 'legend-table'});
    const hdr = ['', 'part'].concat(pair ? ['host'] : []).concat(['share', perQuery ? 'ms / query' : 'time']);
    t.appendChild(el('thead', null, [el('tr', null, hdr.map((x) => el('th', {text: x})))]));
    const tb = el('tbody');
    for (const p of parts) {
      const sw = el('span', {class: 'swatch'});
      sw.style.background = partColour(p.name);
      const cells = [el('td', null, [sw]), el('td', {class: 'mono', text: p.name})];
      if (pair) cells.push(el('td', {text: p.host || '—'}));
      cells.push(el('td', {class: 'num', text: fmtPct(p.share)}));
      cells.push(el('td', {class: 'num', text: perQuery ? (queries ? fmtNum(p.time_ns / queries / 1e6) : '—') : fmtDurNs(p.time_ns)}));
      tb.appendChild(el('tr', {class: isNum(p.share) && p.share > 0 ? '' : 'zero'}, cells));
    }
    t.appendChild(tb);
    s.appendChild(t);
    app.appendChild(s);
  }

  function evidenceTable(ev) {
    const keys = ev ? Object.keys(ev) : [];
    if (!keys.length) return null;
    const t = el('table', {class: 'kv'});
    const tb = el('tbody');
    for (const k of keys) {
      let v = ev[k];
      if (isNum(v)) v = fmtNum(v);
      else if (v === null) v = '—';
      else if (typeof v === 'object') v = JSON.stringify(v);
      tb.appendChild(el('tr', null, [el('th', {class: 'mono', text: k}), el('td', {class: 'mono', text: v})]));
    }
    t.appendChild(tb);
    return t;
  }

  // 3. Findings.
  function renderFindings(app) {
    const r = rep();
    const f = Array.isArray(r.findings) ? r.findings : [];
    const s = section('findings', 'Findings', f.length ? 'Ranked by score: the share of query time (or of the run) each explains.' : null);
    if (!f.length) {
      const reason = r.verdict && r.verdict.reason;
      const lead = reason === 'cannot_account' || reason === 'no_queries' ? 'No finding: nothing measured accounts for the time. ' : 'No bottleneck found. ';
      s.appendChild(el('div', {class: 'empty-finding'}, [el('strong', {text: lead}), txt((r.verdict && r.verdict.summary) || '')]));
    }
    const list = el('ol', {class: 'findings'});
    f.forEach((x, i) => {
      const li = el('li', {class: 'finding', 'data-kind': x.kind});
      li.appendChild(el('div', {class: 'finding-head'}, [
        el('span', {class: 'rank', text: '#' + (i + 1)}),
        el('span', {class: 'kind', text: x.kind}),
        el('span', {class: 'score', text: fmtPct(x.score, 0)}),
        isNum(x.start_ns) && isNum(x.end_ns) && isNum(run().start_ns)
          ? el('span', {class: 'span', text: '+' + fmtNum((x.start_ns - run().start_ns) / 1e9, 1) + ' s … +' + fmtNum((x.end_ns - run().start_ns) / 1e9, 1) + ' s'}) : null,
      ]));
      li.appendChild(el('div', {class: 'summary', text: x.summary || ''}));
      if (x.culprit) li.appendChild(el('div', {class: 'culprit'}, [el('span', {class: 'label', text: 'culprit: '}), txt(x.culprit)]));
      const ev = evidenceTable(x.evidence);
      if (ev) {
        const d = el('details', {class: 'evidence'});
        d.open = true;
        d.appendChild(el('summary', {text: 'evidence (' + Object.keys(x.evidence).length + ')'}));
        d.appendChild(ev);
        li.appendChild(d);
      }
      if (x.suggestion) li.appendChild(el('div', {class: 'suggestion'}, [el('span', {class: 'label', text: 'suggestion: '}), txt(x.suggestion)]));
      list.appendChild(li);
    });
    if (f.length) s.appendChild(list);
    app.appendChild(s);
  }

  // 4. Stalls.
  function renderStalls(app) {
    const r = rep();
    stalls = Array.isArray(r.stalls) ? r.stalls.filter((x) => isNum(x.start_ns) && isNum(x.end_ns)) : [];
    const s = section('stalls', 'Stalls', stalls.length
      ? 'Windows where throughput fell or latency rose well beyond the typical window. Click one to zoom every chart to it.'
      : null);
    if (!stalls.length) {
      const noQ = isNum(run().queries) && run().queries === 0;
      s.appendChild(el('p', {class: 'empty', text: noQ ? 'No stalls: there are no queries in this file to find them in.' : 'No stalls: no window\'s throughput or latency was far from the typical one.'}));
      app.appendChild(s);
      return;
    }
    const t0 = run().start_ns;
    const t = el('table', {class: 'grid stalls'});
    t.appendChild(el('thead', null, [el('tr', null, ['time', 'length', 'cause', 'tps (typical)', 'latency ms (typical)', 'explanation and culprit'].map((x) => el('th', {text: x})))]));
    const tb = el('tbody');
    stalls.forEach((x, i) => {
      const off = isNum(t0) ? '+' + fmtNum((x.start_ns - t0) / 1e9, 1) + ' s' : '';
      const tr = el('tr', {class: 'stall-row', 'data-stall': i, tabindex: 0, title: 'click: zoom every chart to this stall'}, [
        el('td', {class: 'nowrap'}, [el('div', {text: off}), el('div', {class: 'dim', text: clockUTC(x.start_ns / 1e9, true)})]),
        el('td', {class: 'num', text: fmtDurNs(x.end_ns - x.start_ns)}),
        el('td', null, [el('span', {class: 'cause cause-' + String(x.cause).replace(/[^a-z_]/g, ''), text: x.cause || 'unexplained'})]),
        el('td', {class: 'num', text: fmtNum(x.tps, 0) + ' (' + fmtNum(x.typical_tps, 0) + ')'}),
        el('td', {class: 'num', text: fmtNum(x.latency_mean_ms) + ' (' + fmtNum(x.typical_latency_mean_ms) + ')'}),
        el('td', {class: 'expl'}, [el('div', {text: x.explanation || ''}),
          x.culprit ? el('div', {class: 'culprit'}, [el('span', {class: 'label', text: 'culprit: '}), txt(x.culprit)]) : null]),
      ]);
      tr.addEventListener('click', () => selectStall(i));
      tr.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); selectStall(i); }
      });
      tb.appendChild(tr);
    });
    t.appendChild(tb);
    // Many stalls scroll in a box of their own, so the charts stay near.
    s.appendChild(stalls.length > 8 ? el('div', {class: 'scroll-box'}, [t]) : t);
    if (stalls.length > 8) s.appendChild(el('p', {class: 'sub', text: stalls.length + ' stalls; the list scrolls.'}));
    app.appendChild(s);
  }

  function selectStall(i) {
    const x = stalls[i];
    if (!x) return;
    const len = x.end_ns - x.start_ns;
    const bin = (data.timeline && data.timeline.bin_ns) || 1e8;
    const padNs = Math.max(len * 0.6, bin * 3);
    setAllX((x.start_ns - padNs) / 1e9, (x.end_ns + padNs) / 1e9);
    document.querySelectorAll('tr.stall-row').forEach((tr) => tr.classList.toggle('selected', tr.dataset.stall === String(i)));
    if (stallPanel) {
      stallPanel.textContent = '';
      const t0 = run().start_ns;
      stallPanel.appendChild(el('div', {class: 'sp-head'}, [
        el('strong', {text: 'Stall ' + (isNum(t0) ? '+' + fmtNum((x.start_ns - t0) / 1e9, 1) + ' s' : '') + ' (' + clockUTC(x.start_ns / 1e9, true) + '–' + clockUTC(x.end_ns / 1e9, true) + ' UTC): '}),
        el('span', {class: 'cause cause-' + String(x.cause).replace(/[^a-z_]/g, ''), text: x.cause || 'unexplained'}),
      ]));
      stallPanel.appendChild(el('div', {class: 'sp-expl', text: x.explanation || ''}));
      if (x.culprit) stallPanel.appendChild(el('div', {class: 'culprit'}, [el('span', {class: 'label', text: 'culprit: '}), txt(x.culprit)]));
      stallPanel.dataset.stall = String(i);
      stallPanel.hidden = false;
      if (stallPanel.scrollIntoView) stallPanel.scrollIntoView({block: 'nearest'});
    }
  }

  // ---------- charts ----------
  function setAllX(min, max) {
    syncingScale = true;
    try {
      for (const c of charts) c.u.setScale('x', {min: min, max: max});
    } finally {
      syncingScale = false;
    }
    for (const c of charts) markRange(c);
  }
  function resetZoom() {
    const tl = data.timeline;
    setAllX(tlStart(tl) / 1e9, tlEnd(tl) / 1e9);
    if (stallPanel) stallPanel.hidden = true;
    document.querySelectorAll('tr.stall-row.selected').forEach((tr) => tr.classList.remove('selected'));
  }
  function markRange(c) {
    const sc = c.u.scales.x;
    if (isNum(sc.min)) c.el.dataset.xMin = String(sc.min);
    if (isNum(sc.max)) c.el.dataset.xMax = String(sc.max);
  }

  // Translucent rectangles over the stalls, under the series.
  function stallShadePlugin() {
    return {
      hooks: {
        drawClear: [(u) => {
          if (!stalls.length) return;
          const ctx = u.ctx, b = u.bbox;
          ctx.save();
          ctx.beginPath();
          ctx.rect(b.left, b.top, b.width, b.height);
          ctx.clip();
          for (const x of stalls) {
            const a = u.valToPos(x.start_ns / 1e9, 'x', true);
            const z = u.valToPos(x.end_ns / 1e9, 'x', true);
            if (z < b.left || a > b.left + b.width) continue;
            ctx.fillStyle = 'rgba(214, 39, 40, 0.10)';
            ctx.fillRect(a, b.top, Math.max(z - a, 3 * devicePixelRatio), b.height);
            ctx.fillStyle = 'rgba(214, 39, 40, 0.45)';
            ctx.fillRect(a, b.top, Math.max(1, devicePixelRatio), b.height);
          }
          ctx.restore();
        }],
      },
    };
  }

  // The timeline's extent; bins are uniform (start_ns + i * bin_ns) unless
  // edges_ns lists every bin's edges (shorter bins around stalls).
  function hasEdges(tl) { return Array.isArray(tl.edges_ns) && tl.edges_ns.length === tl.bins + 1; }
  function tlStart(tl) { return hasEdges(tl) ? tl.edges_ns[0] : tl.start_ns; }
  function tlEnd(tl) { return hasEdges(tl) ? tl.edges_ns[tl.bins] : tl.start_ns + tl.bins * tl.bin_ns; }
  // Build uPlot data and series from a chart spec.
  function buildChart(spec, tl) {
    const n = tl.bins;
    const xs = new Array(n);
    const edges = hasEdges(tl) ? tl.edges_ns : null;
    for (let i = 0; i < n; i++) {
      xs[i] = (edges ? (edges[i] + edges[i + 1]) / 2 : tl.start_ns + (i + 0.5) * tl.bin_ns) / 1e9;
    }
    const log = !!spec.y_log;
    const series = Array.isArray(spec.series) ? spec.series : [];
    const raw = series.map((s) => {
      const v = Array.isArray(s.values) ? s.values : [];
      const out = new Array(n);
      for (let i = 0; i < n; i++) {
        let y = v[i];
        if (!isNum(y)) y = null;
        else if (log && y <= 0) y = null;
        out[i] = y;
      }
      return out;
    });
    let points = 0;
    for (const r of raw) for (const y of r) if (y !== null) points++;

    let plotted = raw;
    const bands = [];
    if (spec.stacked && !log) {
      const acc = new Array(n).fill(0);
      const any = new Array(n).fill(false);
      for (const r of raw) for (let i = 0; i < n; i++) if (r[i] !== null) any[i] = true;
      plotted = raw.map((r) => {
        const out = new Array(n);
        for (let i = 0; i < n; i++) {
          if (r[i] !== null) acc[i] += r[i];
          // a bin where no series has a value stays a gap
          out[i] = any[i] ? acc[i] : null;
        }
        return out;
      });
      for (let k = 1; k < raw.length; k++) bands.push({series: [k + 1, k]});
    }

    const fmtV = (v) => (v === null || v === undefined ? '—' : fmtNum(v));
    const useries = [{
      label: 'time (UTC)',
      value: (u, v) => (v === null || v === undefined ? '—' : clockUTC(v, true)),
    }];
    series.forEach((s, k) => {
      const col = colourFor(s.label);
      const o = {
        label: String(s.label),
        stroke: col,
        width: spec.stacked ? 1 : 1.5,
        spanGaps: false,
        points: {show: false},
        value: (u, v, si, i) => (i === null || i === undefined ? '—' : fmtV(raw[k][i])),
      };
      if (spec.stacked && !log) o.fill = alpha(col, 0.75);
      useries.push(o);
    });
    const lines = Array.isArray(spec.lines) ? spec.lines.filter((l) => isNum(l.value) && (!log || l.value > 0)) : [];
    const lineData = lines.map((l) => new Array(n).fill(l.value));
    lines.forEach((l) => {
      useries.push({
        label: String(l.label),
        stroke: '#444', width: 1.25, dash: [6, 4], points: {show: false},
        value: () => fmtNum(l.value),
      });
    });
    return {data: [xs].concat(plotted, lineData), series: useries, bands: bands, points: points, log: log};
  }

  function renderTimelines(app) {
    const tl = data.timeline;
    const s = section('timelines', 'Timelines', null);
    if (!tl || !Array.isArray(tl.charts) || !tl.charts.length || !isNum(tl.bins) || tl.bins < 1) {
      s.appendChild(el('p', {class: 'empty', text: 'No timelines in this file.'}));
      app.appendChild(s);
      return;
    }
    const binTxt = fmtDurNs(tl.bin_ns) + ' bins' +
      (hasEdges(tl) && tl.fine_bin_ns ? ' (' + fmtDurNs(tl.fine_bin_ns) + ' around the stalls, to zoom into)' : '');
    s.appendChild(el('p', {class: 'sub', text: 'One time axis (UTC) for all charts, ' + binTxt + '. Drag across a chart to zoom all of them; double-click to reset. Stalls are shaded red; click inside one to select it.'}));
    const bar = el('div', {class: 'chart-toolbar'});
    const btn = el('button', {type: 'button', class: 'reset', text: 'reset zoom'});
    btn.addEventListener('click', resetZoom);
    bar.appendChild(btn);
    s.appendChild(bar);
    stallPanel = el('div', {class: 'stall-panel', 'data-role': 'stall-panel'});
    stallPanel.hidden = true;
    s.appendChild(stallPanel);
    app.appendChild(s);

    const width = chartWidth(s);
    const xMin = tlStart(tl) / 1e9, xMax = tlEnd(tl) / 1e9;
    for (const spec of tl.charts) {
      guard('chart ' + (spec && spec.id), () => {
        const box = el('div', {class: 'chart', 'data-chart-id': spec.id});
        box.appendChild(el('div', {class: 'chart-title'}, [
          el('span', {class: 't', text: spec.title || spec.id}),
          spec.unit ? el('span', {class: 'unit', text: spec.unit + (spec.y_log ? ', log scale' : '') + (spec.stacked ? ', stacked' : '')}) : null,
        ]));
        if (spec.note) box.appendChild(el('div', {class: 'chart-note', text: spec.note}));
        const target = el('div', {class: 'plot'});
        box.appendChild(target);
        s.appendChild(box);
        const b = buildChart(spec, tl);
        box.dataset.points = String(b.points);
        if (!b.points) {
          target.appendChild(el('div', {class: 'empty', text: 'no data in this chart'}));
        }
        const opts = {
          width: width,
          height: 190,
          tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC'),
          series: b.series,
          bands: b.bands,
          legend: {live: true},
          cursor: {
            sync: {key: 'stallscope-x', setSeries: false},
            drag: {x: true, y: false, setScale: true},
            points: {size: 5},
            y: false,
          },
          scales: {
            x: {time: true, min: xMin, max: xMax, auto: false},
            y: b.log ? {distr: 3} : {range: (u, mn, mx) => [Math.min(0, mn || 0), mx > 0 ? mx * 1.08 : 1]},
          },
          axes: [
            {stroke: '#555', grid: {stroke: '#eee'}, ticks: {stroke: '#ddd'}, values: timeTicks, space: 90},
            {stroke: '#555', grid: {stroke: '#eee'}, ticks: {stroke: '#ddd'}, size: 56,
             values: (u, vals) => vals.map((v) => (v === null ? '' : fmtAxis(v)))},
          ],
          plugins: [stallShadePlugin()],
          hooks: {
            setScale: [(u, key) => {
              if (key !== 'x') return;
              const c = charts.find((q) => q.u === u);
              if (c) markRange(c);
              if (syncingScale) return;
              const mn = u.scales.x.min, mx = u.scales.x.max;
              syncingScale = true;
              try {
                for (const o of charts) if (o.u !== u) o.u.setScale('x', {min: mn, max: mx});
              } finally {
                syncingScale = false;
              }
            }],
          },
        };
        if (!b.points && b.log) opts.scales.y = {range: [1, 10], distr: 3};
        const u = new uPlot(opts, b.data, target);
        const c = {u: u, el: box, spec: spec};
        charts.push(c);
        markRange(c);
        // Double-click resets every chart; a click (not a drag) on a shaded
        // stall selects it.
        let down = null;
        u.over.addEventListener('mousedown', (e) => { down = {x: e.clientX, y: e.clientY}; });
        u.over.addEventListener('click', (e) => {
          if (!down || Math.abs(e.clientX - down.x) > 3) return;
          const left = u.cursor.left;
          if (!isNum(left) || left < 0) return;
          const t = u.posToVal(left, 'x') * 1e9;
          const i = stalls.findIndex((x) => t >= x.start_ns && t <= x.end_ns);
          if (i >= 0) selectStall(i);
        });
        u.over.addEventListener('dblclick', () => { setTimeout(resetZoom, 0); });
      });
    }
    window.addEventListener('resize', () => {
      const w = chartWidth(s);
      for (const c of charts) c.u.setSize({width: w, height: 190});
    });
  }
  // x ticks as UTC clock time; milliseconds only when the ticks are closer than 1 s.
  function timeTicks(u, splits) {
    const step = splits.length > 1 ? Math.abs(splits[1] - splits[0]) : 1;
    return splits.map((v) => {
      if (v === null) return '';
      if (step >= 0.999) return clockUTC(v, false);
      // sub-second ticks: as many decimals as the step needs
      const digits = step >= 0.099 ? 1 : step >= 0.0099 ? 2 : 3;
      return clockUTC(v, true).slice(0, 9 + digits);
    });
  }
  function chartWidth(s) {
    const w = s.clientWidth || 1160;
    return Math.max(480, Math.min(w, 1400) - 4);
  }
  function fmtAxis(v) {
    const a = Math.abs(v);
    if (a >= 1e6) return fmtNum(v / 1e6, 1) + 'M';
    if (a >= 1e4) return fmtNum(v / 1e3, 0) + 'k';
    if (a >= 100 || a === 0) return fmtNum(v, 0);
    if (a >= 1) return fmtNum(v, a >= 10 ? 0 : 1).replace(/\.0$/, '');
    return String(+v.toPrecision(2));
  }

  // 6. Tables.
  function gridTable(cols, rows, cls) {
    const t = el('table', {class: 'grid' + (cls ? ' ' + cls : '')});
    t.appendChild(el('thead', null, [el('tr', null, cols.map((c) => el('th', {class: c.num ? 'num' : '', text: c.h})))]));
    const tb = el('tbody');
    for (const r of rows) {
      tb.appendChild(el('tr', null, cols.map((c) => {
        const v = c.get(r);
        if (c.trunc) {
          const full = v === null || v === undefined ? '' : String(v);
          const short = full.length > c.trunc ? full.slice(0, c.trunc - 1) + '…' : full;
          return el('td', {class: 'mono trunc', title: full.length > c.trunc ? full : null, text: short || '—'});
        }
        return el('td', {class: (c.num ? 'num' : '') + (c.mono ? ' mono' : '') + (c.nowrap ? ' nowrap' : ''), text: v === null || v === undefined || v === '' ? '—' : v});
      })));
    }
    t.appendChild(tb);
    return t;
  }
  function tableSection(parent, key, title, rows, cols, note, emptyText) {
    const s = el('section', {class: 'table-block', 'data-table': key});
    s.appendChild(el('h3', {text: title}));
    if (!rows || !rows.length) {
      s.appendChild(el('p', {class: 'empty', text: emptyText + (note ? ' — ' + note : '.')}));
    } else {
      if (note) s.appendChild(el('p', {class: 'sub', text: note}));
      s.appendChild(gridTable(cols, rows));
    }
    parent.appendChild(s);
  }
  function renderTables(app) {
    const t = data.tables || {};
    const s = section('tables', 'Processes, waits, SQL, locks');
    const procs = Array.isArray(t.processes) ? t.processes : [];
    const multiHost = new Set(procs.map((p) => p.host)).size > 1;
    const pcols = [];
    if (multiHost) pcols.push({h: 'host', nowrap: true, get: (p) => p.host});
    pcols.push(
      {h: 'pid', num: true, get: (p) => p.pid},
      {h: 'comm', mono: true, get: (p) => p.comm},
      {h: 'command line', trunc: 60, get: (p) => p.cmdline},
      {h: 'CPU s', num: true, get: (p) => fmtNum(p.cpu_s, 2)},
      {h: 'mean cores', num: true, get: (p) => fmtNum(p.cores, 3)},
      {h: 'run-queue delay s', num: true, get: (p) => fmtNum(p.run_delay_s, 2)},
      {h: 'D-state s', num: true, get: (p) => fmtNum(p.d_state_s, 2)},
      {h: 'top wchan', mono: true, get: (p) => p.top_wchan});
    const byCpu = procs.filter((p) => isNum(p.cpu_s) && p.cpu_s > 0).sort((a, b) => b.cpu_s - a.cpu_s).slice(0, 20);
    const offOf = (p) => (isNum(p.off_cpu_s) ? p.off_cpu_s : (p.run_delay_s || 0) + (p.d_state_s || 0));
    const byOff = procs.filter((p) => offOf(p) > 0).sort((a, b) => offOf(b) - offOf(a)).slice(0, 20);
    const offCols = pcols.slice();
    offCols.splice(offCols.findIndex((c) => c.h === 'run-queue delay s'), 0, {h: 'off-CPU s', num: true, get: (p) => fmtNum(offOf(p), 2)});
    tableSection(s, 'processes_cpu', 'Top processes by CPU', byCpu, pcols, t.processes_note, 'No process used CPU');
    tableSection(s, 'processes_off_cpu', 'Top processes by off-CPU time (run-queue delay + D state)', byOff, offCols, t.processes_note, 'No process waited in the run queue or in D state');

    const we = Array.isArray(t.wait_events) ? t.wait_events : [];
    tableSection(s, 'wait_events', 'Top wait events (ASH)', we, [
      {h: 'type', get: (w) => w.wait_event_type},
      {h: 'event', mono: true, get: (w) => w.wait_event},
      {h: 'samples', num: true, get: (w) => fmtNum(w.samples, 0)},
      {h: 'avg active sessions', num: true, get: (w) => fmtNum(w.aas, 2)},
      {h: 'share', num: true, get: (w) => fmtPct(w.share)},
    ], t.wait_events_note, 'No wait events sampled');

    const sql = Array.isArray(t.sql) ? t.sql : [];
    tableSection(s, 'sql', 'Top SQL by database time', sql, [
      {h: 'query id', num: true, mono: true, get: (q) => (q.query_id === null || q.query_id === undefined ? null : String(q.query_id))},
      {h: 'query', trunc: 90, get: (q) => q.query},
      {h: 'samples', num: true, get: (q) => fmtNum(q.samples, 0)},
      {h: 'DB time s', num: true, get: (q) => fmtNum(q.db_time_s, 1)},
      {h: 'share', num: true, get: (q) => fmtPct(q.share)},
      {h: 'on CPU', num: true, get: (q) => fmtPct(q.cpu_share)},
      {h: 'top wait', mono: true, get: (q) => q.top_wait},
    ], t.sql_note, 'No SQL sampled');

    renderLockChains(s, t.lock_chains, t.lock_chains_note);
    app.appendChild(s);
  }
  function renderLockChains(parent, lc, note) {
    const s = el('section', {class: 'table-block', 'data-table': 'lock_chains'});
    s.appendChild(el('h3', {text: 'Lock chains'}));
    if (!lc) {
      s.appendChild(el('p', {class: 'empty', text: 'No blocking chains were seen' + (note ? ' — ' + note : '.')}));
      parent.appendChild(s);
      return;
    }
    if (lc.culprit) s.appendChild(el('div', {class: 'culprit'}, [el('span', {class: 'label', text: 'culprit: '}), txt(lc.culprit)]));
    const facts = [];
    if (lc.hot_lock) facts.push('hot lock: ' + lc.hot_lock);
    if (lc.turnstile) facts.push('a turnstile (sessions took turns holding it)');
    if (isNum(lc.distinct_roots)) facts.push(lc.distinct_roots + ' distinct root(s)');
    if (isNum(lc.waiter_samples)) facts.push(lc.waiter_samples + ' waiter samples' + (isNum(lc.polls) ? ' over ' + lc.polls + ' polls' : ''));
    if (facts.length) s.appendChild(el('p', {class: 'sub', text: facts.join(' · ')}));
    const rows = [];
    if (lc.root) rows.push(Object.assign({role: 'root'}, lc.root));
    if (Array.isArray(lc.chain)) for (const c of lc.chain) rows.push(Object.assign({role: 'waiter'}, c));
    if (rows.length) {
      s.appendChild(gridTable([
        {h: '', get: (r) => r.role},
        {h: 'pid', num: true, get: (r) => r.pid},
        {h: 'state', get: (r) => r.state},
        {h: 'application', mono: true, get: (r) => r.application_name},
        {h: 'xact age s', num: true, get: (r) => (isNum(r.xact_age_s) ? fmtNum(r.xact_age_s, 1) : null)},
        {h: 'waits for', mono: true, get: (r) => (r.locktype ? r.locktype + ' ' + (r.mode || '') + (r.target ? ' on ' + r.target : '') : null)},
        {h: 'query', trunc: 80, get: (r) => r.query},
      ], rows));
    }
    parent.appendChild(s);
  }

  // 7. Comparison with a baseline.
  function renderBaseline(app) {
    const b = data.baseline;
    if (!b) return;
    const s = section('comparison', 'Comparison with the baseline');
    const cmp = b.comparison || {};
    if (cmp.summary) s.appendChild(el('p', {class: 'cmp-summary', text: cmp.summary}));
    const a = run(), br = (b.report && b.report.run) || {};
    const thisName = data.files && data.files.run ? data.files.run : 'this run';
    const baseName = b.title || (data.files && data.files.baseline) || 'baseline';
    const ratio = (x, y) => (isNum(x) && isNum(y) && y !== 0 ? (x / y >= 1 ? '×' + fmtNum(x / y, 2) : '×' + fmtNum(x / y, 2)) : '—');
    const rows = [
      ['tps', a.tps, br.tps, 1],
      ['queries', a.queries, br.queries, 0],
      ['latency mean ms', a.latency_mean_ms, br.latency_mean_ms],
      ['latency p50 ms', a.latency_p50_ms, br.latency_p50_ms],
      ['latency p99 ms', a.latency_p99_ms, br.latency_p99_ms],
    ].map((r) => ({k: r[0], a: fmtNum(r[1], r[3]), b: fmtNum(r[2], r[3]), c: ratio(r[1], r[2])}));
    s.appendChild(gridTable([
      {h: '', get: (r) => r.k}, {h: thisName, num: true, get: (r) => r.a},
      {h: baseName + ' (baseline)', num: true, get: (r) => r.b}, {h: 'this ÷ baseline', num: true, get: (r) => r.c},
    ], rows, 'compact'));

    const pa = partsOf(rep()), pb = partsOf(b.report || {});
    const names = [];
    for (const p of pa.concat(pb)) if (!names.includes(p.name)) names.push(p.name);
    if (names.length) {
      const qa = isNum(a.queries) && a.queries > 0 ? a.queries : null;
      const qb = isNum(br.queries) && br.queries > 0 ? br.queries : null;
      const find = (arr, n) => arr.find((p) => p.name === n);
      const prow = names.map((n) => {
        const x = find(pa, n), y = find(pb, n);
        return {
          n: n,
          sa: x ? fmtPct(x.share) : '—', sb: y ? fmtPct(y.share) : '—',
          ma: x && qa ? fmtNum(x.time_ns / qa / 1e6) : '—', mb: y && qb ? fmtNum(y.time_ns / qb / 1e6) : '—',
          d: x && y && isNum(x.share) && isNum(y.share) ? ((x.share - y.share) >= 0 ? '+' : '') + fmtNum((x.share - y.share) * 100, 1) + ' pt' : '—',
        };
      });
      s.appendChild(el('h3', {text: 'Time accounting side by side'}));
      s.appendChild(gridTable([
        {h: 'part', mono: true, get: (r) => r.n},
        {h: 'share (this)', num: true, get: (r) => r.sa}, {h: 'share (baseline)', num: true, get: (r) => r.sb},
        {h: 'change', num: true, get: (r) => r.d},
        {h: 'ms/query (this)', num: true, get: (r) => r.ma}, {h: 'ms/query (baseline)', num: true, get: (r) => r.mb},
      ], prow, 'compact'));
    }
    if (b.report && b.report.verdict) {
      s.appendChild(el('p', {class: 'sub'}, [el('strong', {text: 'Baseline verdict: '}), txt((b.report.verdict.kind || 'no bottleneck') + ' — ' + (b.report.verdict.summary || ''))]));
    }
    const diffs = Array.isArray(b.differences) ? b.differences : [];
    if (diffs.length) {
      s.appendChild(el('h3', {text: 'Differences'}));
      s.appendChild(el('ul', {class: 'diffs'}, diffs.map((d) => el('li', {text: d}))));
    }
    app.appendChild(s);
  }
  function partsOf(r) {
    const acc = r.accounting && Array.isArray(r.accounting.parts) ? r.accounting.parts : [];
    return acc.map((p) => ({name: String(p.name !== undefined ? p.name : p.part), time_ns: p.time_ns,
                            share: p.share !== undefined ? p.share : p.query_time_share}));
  }

  // 8. Notes.
  function renderNotes(app) {
    const notes = Array.isArray(rep().notes) ? rep().notes : [];
    const s = section('notes', 'What this report could not see / caveats');
    if (!notes.length) s.appendChild(el('p', {class: 'empty', text: 'No caveats were recorded.'}));
    else s.appendChild(el('ul', {class: 'notes'}, notes.map((n) => el('li', {text: n}))));
    app.appendChild(s);
  }

  function main() {
    const app = document.getElementById('app');
    try {
      const node = document.getElementById('stallscope-data');
      if (!node) throw new Error('no #stallscope-data element');
      data = JSON.parse(node.textContent);
      if (!data || typeof data !== 'object') throw new Error('the embedded data is not an object');
      if (typeof uPlot !== 'function') throw new Error('uPlot did not load');
    } catch (e) {
      fail('reading the data: ' + e.message, e);
      document.body.dataset.ready = '1';
      return;
    }
    if (data.title) document.title = 'stallscope report — ' + data.title;
    guard('header', () => renderHeader(app));
    guard('time accounting', () => renderAccounting(app));
    guard('findings', () => renderFindings(app));
    guard('stalls', () => renderStalls(app));
    guard('timelines', () => renderTimelines(app));
    guard('tables', () => renderTables(app));
    guard('comparison', () => renderBaseline(app));
    guard('notes', () => renderNotes(app));
    app.appendChild(el('footer', {class: 'foot', text: (data.generated_by || 'stallscope') + ' · times in UTC · self-contained page: no network requests'}));
    try { performance.mark('stallscope-ready'); } catch (e) { /* older browsers */ }
    document.body.dataset.ready = '1';
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', main);
  else main();
})();
