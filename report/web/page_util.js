// stallscope report page, its helpers: DOM building from text only, number
// and time formatting, and the colours of series and accounting parts.
// Plain ES2020, no modules; runs before report.js, which takes these from
// window.stallscopePage.
//
// Every string the page shows is untrusted: el() builds elements with
// createElement and textContent only, and refuses any attribute it does not
// list — no HTML parsing of any string, anywhere.
window.stallscopePage = (function () {
  'use strict';

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
    client_sleep: '#e6dcb8', client_idle: '#d6d6e8', client_blocked: '#c97b3a',
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

  return {el, txt, isNum, fmtNum, fmtPct, fmtDurNs, clockUTC, dateUTC, colourFor, partFamily,
          partColour, lighten, isLight, alpha};
})();
