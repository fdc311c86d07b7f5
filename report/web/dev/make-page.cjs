#!/usr/bin/env node
// Dev helper: assemble the HTML shell `stallscope report` writes, from a data
// JSON, so the page can be worked on without the C++ side.
//   node make-page.cjs data.json out.html
'use strict';
const fs = require('fs');
const path = require('path');

const [dataPath, outPath] = process.argv.slice(2);
if (!dataPath || !outPath) {
  console.error('usage: node make-page.cjs data.json out.html');
  process.exit(2);
}
const web = path.join(__dirname, '..');
const read = (p) => fs.readFileSync(path.join(web, p), 'utf8');
const data = JSON.parse(fs.readFileSync(dataPath, 'utf8'));

const escHtml = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;')
  .replace(/>/g, '&gt;').replace(/"/g, '&quot;');
// JSON inside <script>: no <, >, & and no U+2028/9 as raw characters.
const json = JSON.stringify(data).replace(/[<>&\u2028\u2029]/g,
  (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));

const html = `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>stallscope report — ${escHtml(data.title || '')}</title>
<style>${read('node_modules/uplot/dist/uPlot.min.css')}</style>
<style>${read('report.css')}</style>
</head><body>
<noscript>This report needs JavaScript to draw its charts and tables.</noscript>
<div id="app"></div>
<script type="application/json" id="stallscope-data">${json}</script>
<script>${read('node_modules/uplot/dist/uPlot.iife.min.js')}</script>
<script>${read('page_util.js')}</script>
<script>${read('report.js')}</script>
</body></html>
`;
fs.writeFileSync(outPath, html);
