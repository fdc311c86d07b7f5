#!/usr/bin/env node
// Opens stallscope HTML reports in Debian's chromium (through playwright-core)
// and checks them: no console errors or page errors, no network request, no
// dialog, the page finishes rendering, the expected charts/findings/texts are
// there, clicking a stall zooms the charts to it, nothing was injected.
//
//   node tests/report/browser_test.cjs --node-modules DIR --out-dir DIR \
//        [--time] [--chromium PATH] PAGE.html[:EXPECT.json] ...
//
// EXPECT: {"charts": ["throughput", ...], "findings": ["lock_wait", ...],
//          "texts": ["<img src=x oner", ...], "stall_click": true}
// Prints `ok PAGE (N ms to ready, M charts)` per page, or with --time only
// `open_ms PAGE N`; one line per failure naming the page; exits 1 on any.
// A PNG screenshot of each page (as opened) goes to OUT_DIR/<page basename>.png.
//
// With the dev samples (no C++ build needed):
//   cd report/web/dev && for s in closed pair record baseline; do
//     node make-page.cjs sample-$s.json /tmp/sample-$s.html; done; cd ../../..
//   node tests/report/browser_test.cjs --node-modules report/web/node_modules \
//     --out-dir /tmp/shots /tmp/sample-closed.html:report/web/dev/sample-closed.expect.json ...
'use strict';
const fs = require('fs');
const path = require('path');
const {pathToFileURL} = require('url');

function usage(msg) {
  if (msg) console.error(msg);
  console.error('usage: browser_test.cjs --node-modules DIR --out-dir DIR [--time] [--chromium PATH] PAGE.html[:EXPECT.json] ...');
  process.exit(2);
}

const args = process.argv.slice(2);
let nodeModules = null, outDir = null, timeOnly = false, chromiumPath = '/usr/bin/chromium';
const pages = [];
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--node-modules') nodeModules = args[++i];
  else if (a === '--out-dir') outDir = args[++i];
  else if (a === '--time') timeOnly = true;
  else if (a === '--chromium') chromiumPath = args[++i];
  else if (a === '-h' || a === '--help') usage();
  else if (a.startsWith('--')) usage('unknown option ' + a);
  else pages.push(a);
}
if (!nodeModules || !outDir || !pages.length) usage();

let chromium;
try {
  ({chromium} = require(path.resolve(nodeModules, 'playwright-core')));
} catch (e) {
  usage('cannot load playwright-core from ' + nodeModules + ': ' + e.message);
}
fs.mkdirSync(outDir, {recursive: true});

// PAGE.html[:EXPECT.json] — split on the last ':' only if what follows ends in .json.
function parseSpec(s) {
  const m = /^(.*\.html?):([^:]+\.json)$/i.exec(s);
  return m ? {page: m[1], expect: m[2]} : {page: s, expect: null};
}

const READY_TIMEOUT_MS = 10000;

async function checkPage(browser, spec) {
  const failures = [];
  const name = spec.page;
  const bad = (msg) => failures.push(msg);
  let expect = {};
  if (spec.expect) {
    try {
      expect = JSON.parse(fs.readFileSync(spec.expect, 'utf8'));
    } catch (e) {
      bad('cannot read ' + spec.expect + ': ' + e.message);
    }
  }
  const abs = path.resolve(spec.page);
  if (!fs.existsSync(abs)) {
    bad('no such file');
    return {failures};
  }
  const url = pathToFileURL(abs).href;
  const context = await browser.newContext({viewport: {width: 1240, height: 900}, timezoneId: 'UTC'});
  const page = await context.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error') bad('console error: ' + m.text());
  });
  page.on('pageerror', (e) => bad('page error: ' + (e && e.message ? e.message : String(e))));
  page.on('request', (r) => {
    const u = r.url();
    if (u !== url) bad('network request: ' + u.slice(0, 200));
  });
  page.on('dialog', async (d) => {
    bad('dialog opened (' + d.type() + '): ' + d.message());
    try { await d.dismiss(); } catch (e) { /* already closed */ }
  });

  let readyMs = null, nCharts = 0;
  try {
    await page.goto(url, {waitUntil: 'load', timeout: READY_TIMEOUT_MS});
    try {
      await page.waitForSelector('body[data-ready="1"]', {timeout: READY_TIMEOUT_MS, state: 'attached'});
    } catch (e) {
      bad('body[data-ready="1"] did not appear within ' + READY_TIMEOUT_MS / 1000 + ' s');
    }
    // Navigation start → data-ready: the page marks 'stallscope-ready'.
    readyMs = await page.evaluate(() => {
      const m = performance.getEntriesByName('stallscope-ready');
      // without the mark (another page script): now, right after data-ready was seen
      return m.length ? m[0].startTime : performance.now();
    });
    const err = await page.evaluate(() => document.body.dataset.error || null);
    if (err) bad('data-error: ' + err);

    const state = await page.evaluate(() => {
      const charts = {};
      document.querySelectorAll('[data-chart-id]').forEach((e) => {
        charts[e.dataset.chartId] = Number(e.dataset.points || 0);
      });
      const findings = Array.from(document.querySelectorAll('[data-section="findings"] [data-kind]')).map((e) => e.dataset.kind);
      const imgs = document.querySelectorAll('img').length;
      const onAttrs = [];
      for (const e of document.querySelectorAll('*')) {
        for (const a of e.attributes) if (/^on/i.test(a.name)) onAttrs.push(e.tagName.toLowerCase() + '[' + a.name + ']');
      }
      const scripts = document.querySelectorAll('script').length;
      return {charts, findings, imgs, onAttrs, scripts, text: document.body.innerText};
    });
    nCharts = Object.keys(state.charts).length;
    for (const id of expect.charts || []) {
      if (!(id in state.charts)) bad('chart missing: ' + id);
      else if (!state.charts[id]) bad('chart has no points: ' + id);
    }
    for (const k of expect.findings || []) {
      if (!state.findings.includes(k)) bad('finding not listed: ' + k + ' (listed: ' + (state.findings.join(', ') || 'none') + ')');
    }
    for (const t of expect.texts || []) {
      if (!state.text.includes(t)) bad('text not shown: ' + JSON.stringify(t));
    }
    if (state.imgs) bad(state.imgs + ' img element(s) in the DOM');
    if (state.onAttrs.length) bad('on* attributes in the DOM: ' + state.onAttrs.slice(0, 5).join(', '));
    // The shell has exactly four scripts: the data, uPlot, page_util.js,
    // report.js.
    if (state.scripts !== 4) bad(state.scripts + ' script elements (expected 4: something was injected)');

    if (expect.stall_click) await checkStallClick(page, bad);
  } catch (e) {
    bad('exception: ' + (e && e.message ? e.message.split('\n')[0] : String(e)));
  }
  const shot = path.join(outDir, path.basename(spec.page).replace(/\.html?$/i, '') + '.png');
  try {
    // The screenshot shows the page as opened (reset any zoom done by the checks).
    await page.evaluate(() => {
      const b = document.querySelector('button.reset');
      if (b) b.click();
    });
    await page.screenshot({path: shot, fullPage: true});
  } catch (e) {
    bad('screenshot failed: ' + e.message);
  }
  await context.close();
  return {failures, readyMs, nCharts};
}

async function checkStallClick(page, bad) {
  const row = await page.$('tr.stall-row');
  if (!row) {
    bad('stall_click: no stall listed');
    return;
  }
  const stall = await page.evaluate(() => {
    const d = JSON.parse(document.getElementById('stallscope-data').textContent);
    const s = (d.report.stalls || [])[0];
    return s ? {start: s.start_ns / 1e9, end: s.end_ns / 1e9, explanation: s.explanation} : null;
  });
  await row.click();
  await page.waitForTimeout(50);
  const st = await page.evaluate(() => {
    const ranges = Array.from(document.querySelectorAll('[data-chart-id]')).map((e) => ({
      id: e.dataset.chartId, min: Number(e.dataset.xMin), max: Number(e.dataset.xMax)}));
    const panel = document.querySelector('[data-role="stall-panel"]');
    const tl = JSON.parse(document.getElementById('stallscope-data').textContent).timeline;
    return {ranges, panel: panel && !panel.hidden ? panel.innerText : null,
            full: tl ? tl.bins * tl.bin_ns / 1e9 : null};
  });
  if (!stall) {
    bad('stall_click: no stall in the data');
    return;
  }
  if (!st.ranges.length) bad('stall_click: no charts');
  for (const r of st.ranges) {
    if (!(r.min <= stall.start && r.max >= stall.end)) {
      bad('stall_click: chart ' + r.id + ' x range [' + r.min + ', ' + r.max + '] does not contain the stall [' + stall.start + ', ' + stall.end + ']');
    } else if (st.full && r.max - r.min >= st.full * 0.999) {
      bad('stall_click: chart ' + r.id + ' was not zoomed');
    }
  }
  if (!st.panel) bad('stall_click: no stall explanation panel shown');
  else if (stall.explanation && !st.panel.includes(stall.explanation.slice(0, 40))) bad('stall_click: the panel does not show the stall\'s explanation');
}

(async () => {
  let browser;
  try {
    browser = await chromium.launch({
      executablePath: chromiumPath,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  } catch (e) {
    console.error('cannot launch ' + chromiumPath + ': ' + e.message.split('\n')[0]);
    process.exit(1);
  }
  let failed = 0;
  for (const s of pages) {
    const spec = parseSpec(s);
    const r = await checkPage(browser, spec);
    if (r.failures.length) {
      failed++;
      for (const f of r.failures) console.log('FAIL ' + spec.page + ': ' + f);
    } else if (timeOnly) {
      console.log('open_ms ' + spec.page + ' ' + (r.readyMs === null ? 'NA' : Math.round(r.readyMs)));
    } else {
      console.log('ok ' + spec.page + ' (' + (r.readyMs === null ? '?' : Math.round(r.readyMs)) + ' ms to ready, ' + r.nCharts + ' charts)');
    }
  }
  await browser.close();
  process.exit(failed ? 1 : 0);
})();
