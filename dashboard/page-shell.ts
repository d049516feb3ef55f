/**
 * What llmq's own pages share: one self-contained HTML document each (CSS and script inline,
 * allowed by the page's CSP nonce; nothing fetched from elsewhere), the bar of links, the look,
 * and the script helpers every page uses. Every figure has a `data-testid` and its raw value in
 * `data-value`, so a browser test reads what a person sees. Text from Redis (queue, tenant and
 * model names) is only ever set with `textContent`: it is never markup.
 */

import { NAV_CSS, navBar, type PageId } from './nav.ts';

export interface PageParts {
  readonly nonce: string;
  readonly title: string;
  readonly current: PageId;
  readonly readOnly: boolean;
  /** The markup inside `<main>`. */
  readonly body: string;
  /** The page's own script, after the shared helpers. */
  readonly script: string;
  /** Extra CSS of the page. */
  readonly style?: string;
}

/** A page: the bar, a header with the queue picker and status, `body`, and the scripts. */
export function pageHtml(p: PageParts): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<link rel="icon" href="data:,">
<title>llmq · ${p.title}</title>
<style nonce="${p.nonce}">${NAV_CSS}${PAGE_CSS}${p.style ?? ''}</style>
</head>
<body>
${navBar(p.current, p.readOnly)}
<header>
  <h1 id="title" data-testid="title">${p.title}</h1>
  <label class="pick">queue <select id="queue-select" data-testid="queue-select"></select></label>
  <span id="status" data-testid="status" class="status">connecting&hellip;</span>
</header>
<main>
${p.body}
</main>
<script nonce="${p.nonce}">${COMMON_SCRIPT}${p.script}</script>
</body>
</html>
`;
}

/** The range picker (15 min, 1 h, 24 h), for pages that show history. */
export const RANGE_PICKER = `<div class="ranges" role="group" aria-label="range">
  <button type="button" data-range="15m" data-testid="range-15m">15 min</button>
  <button type="button" data-range="1h" data-testid="range-1h">1 h</button>
  <button type="button" data-range="24h" data-testid="range-24h">24 h</button>
</div>`;

const PAGE_CSS = `
:root { --bg:#f6f7f9; --fg:#1c2430; --muted:#667085; --card:#fff; --line:#e4e7ec; --accent:#3b6fd8;
  --reserved:#b8c9ef; --actual:#3b6fd8; --limit:#d92d20; --warn:#dc6803; --ok:#12b76a; --c2:#7a5af8; --c3:#0e9384; --c4:#98a2b3; }
@media (prefers-color-scheme: dark) { :root { --bg:#151a21; --fg:#e6e9ef; --muted:#98a2b3; --card:#1e2530;
  --line:#2c3543; --reserved:#3d4f73; --actual:#7aa2f7; } }
* { box-sizing: border-box; }
body { margin:0; padding-top:32px; font:14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; background:var(--bg); color:var(--fg); }
header { display:flex; gap:1.2rem; align-items:center; padding:.7rem 1.2rem; background:var(--card); border-bottom:1px solid var(--line); flex-wrap:wrap; }
header h1 { font-size:1.05rem; margin:0; }
a { color:var(--accent); text-decoration:none; }
a:hover { text-decoration:underline; }
.pick select { margin-left:.3rem; font:inherit; padding:.15rem .3rem; }
.status { margin-left:auto; color:var(--muted); font-size:.85rem; }
.status.error { color:var(--limit); }
main { padding:1rem 1.2rem 2rem; max-width:1280px; }
h2 { font-size:.95rem; margin:1.4rem 0 .5rem; }
h2 small, h3 small { font-weight:normal; color:var(--muted); margin-left:.6rem; }
.tiles { display:grid; grid-template-columns:repeat(auto-fill, minmax(200px, 1fr)); gap:.7rem; }
.tiles.small { grid-template-columns:repeat(auto-fill, minmax(140px, 1fr)); }
.tile { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:.6rem .8rem; }
.tile h3 { margin:0 0 .25rem; font-size:.75rem; font-weight:600; text-transform:uppercase; letter-spacing:.04em; color:var(--muted); }
.tile b { display:block; font-size:1.25rem; font-variant-numeric:tabular-nums; }
.tile small { color:var(--muted); }
.hot { color:var(--warn); }
.bad { color:var(--limit); }
table.usage { width:100%; border-collapse:collapse; background:var(--card); border:1px solid var(--line); border-radius:8px; }
.usage th, .usage td { padding:.35rem .7rem; border-bottom:1px solid var(--line); text-align:left; }
.usage th { font-size:.75rem; color:var(--muted); font-weight:600; }
.usage .n { text-align:right; font-variant-numeric:tabular-nums; }
.usage td.why { color:var(--muted); font-style:italic; }
.bar-cell { width:24%; }
.bar { height:.6rem; background:var(--line); border-radius:3px; overflow:hidden; display:flex; }
.bar span { display:block; height:100%; background:var(--actual); }
.bar span.others { background:var(--c4); }
.bar.hot span:first-child { background:var(--warn); }
.charts { margin-top:.9rem; display:grid; grid-template-columns:repeat(auto-fill, minmax(560px, 1fr)); gap:.9rem; }
figure[hidden] { display:none; }
figure { margin:0; background:var(--card); border:1px solid var(--line); border-radius:8px; padding:.5rem .6rem .3rem; }
figcaption { font-size:.85rem; font-weight:600; margin:0 0 .2rem; }
figcaption small { font-weight:normal; color:var(--muted); margin-left:.4rem; }
svg { width:100%; height:auto; display:block; }
svg text { fill:var(--muted); font-size:11px; }
svg .grid { stroke:var(--line); }
svg .s0 { fill:var(--actual); stroke:var(--actual); } svg .s1 { fill:var(--warn); stroke:var(--warn); }
svg .s2 { fill:var(--c2); stroke:var(--c2); } svg .s3 { fill:var(--c3); stroke:var(--c3); }
svg .s4 { fill:var(--c4); stroke:var(--c4); } svg .s5 { fill:var(--limit); stroke:var(--limit); }
svg .reserved { fill:none; stroke:var(--muted); stroke-width:1; stroke-dasharray:2 2; }
svg polyline, svg polyline[class] { fill:none; stroke-width:1.8; }
svg .limit { stroke:var(--limit); stroke-dasharray:6 4; stroke-width:1.5; fill:none; }
.legend { font-size:.78rem; color:var(--muted); margin:.2rem 0 0; }
.legend span { white-space:nowrap; }
.toolbar { margin:0 0 .8rem; display:flex; gap:.8rem; align-items:center; flex-wrap:wrap; }
.key { display:inline-block; width:.8rem; height:.6rem; margin:0 .25rem 0 .7rem; vertical-align:baseline; border-radius:2px; }
.key.s0 { background:var(--actual); } .key.s1 { background:var(--warn); } .key.s2 { background:var(--c2); }
.key.s3 { background:var(--c3); } .key.s4 { background:var(--c4); } .key.s5 { background:var(--limit); }
.key.limit { border-top:2px dashed var(--limit); height:0; border-radius:0; }
.key.reserved { border:1px dashed var(--muted); background:none; }
.ranges { display:inline-flex; border:1px solid var(--line); border-radius:6px; overflow:hidden; }
.ranges button { font:inherit; border:0; background:var(--card); color:var(--fg); padding:.25rem .7rem; cursor:pointer; }
.ranges button + button { border-left:1px solid var(--line); }
.ranges button[aria-pressed="true"] { background:var(--accent); color:#fff; }
.empty { color:var(--muted); }
.note { color:var(--muted); font-size:.82rem; margin:.3rem 0 0; }
`;

/** Helpers every page's script uses (plain ES2020, no build step). */
const COMMON_SCRIPT = `
'use strict';
const $ = (id) => document.getElementById(id);
const num = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const params = new URLSearchParams(location.search);
let queue = params.get('queue') || '';
function set(id, value, text) {
  const el = $(id);
  if (!el) return;
  el.dataset.value = value === null || value === undefined ? '' : String(value);
  el.textContent = text !== undefined ? text : value === null || value === undefined ? '\\u2013' : num.format(value);
}
function compact(n) {
  if (n === null || n === undefined) return '\\u2013';
  const a = Math.abs(n);
  return a >= 1e9 ? (n / 1e9).toFixed(1) + 'G' : a >= 1e6 ? (n / 1e6).toFixed(1) + 'M' : a >= 1e4 ? (n / 1e3).toFixed(1) + 'k' : num.format(n);
}
function bytes(n) {
  if (n === null || n === undefined) return '\u2013';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let v = n, u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return (u === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + ' ' + units[u];
}
function ms(v) {
  if (v === null || v === undefined) return '\\u2013';
  return v < 1000 ? Math.round(v) + ' ms' : v < 60000 ? (v / 1000).toFixed(v < 10000 ? 2 : 1) + ' s' : v < 3600000 ? (v / 60000).toFixed(1) + ' min' : (v / 3600000).toFixed(1) + ' h';
}
function usd(v) { return v === null || v === undefined ? '\\u2013' : '$' + (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : v.toFixed(4)); }
function pct(r) { return r === null || r === undefined ? '\\u2013' : Math.round(r * 100) + '%'; }
function clock(t) { return new Date(t).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' }); }
function cellRow(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) {
    const td = document.createElement('td');
    const spec = typeof c === 'object' && c !== null ? c : { text: c };
    if (spec.href) { const a = document.createElement('a'); a.href = spec.href; a.textContent = spec.text; td.append(a); }
    else td.textContent = spec.text;
    if (spec.cls) td.className = spec.cls;
    if (spec.testid) { td.dataset.testid = spec.testid; td.dataset.value = String(spec.value ?? spec.text); }
    tr.append(td);
  }
  return tr;
}
function emptyRow(colspan, why, testid) {
  const tr = document.createElement('tr');
  const td = document.createElement('td');
  td.colSpan = colspan;
  td.className = 'why';
  td.textContent = why;
  if (testid) td.dataset.testid = testid;
  tr.append(td);
  return tr;
}
function queues(list) {
  const sel = $('queue-select');
  if (Array.from(sel.options).map((o) => o.value).join('\\n') !== list.join('\\n'))
    sel.replaceChildren(...list.map((q) => { const o = document.createElement('option'); o.value = q; o.textContent = q; return o; }));
  sel.value = queue;
}
/** The page's queue list, and its view shown (or the empty note): the view, or null. */
function showView(body) {
  queues(body.queues);
  $('empty').hidden = body.view !== null;
  $('view').hidden = body.view === null;
  return body.view;
}
function setParam(name, value) {
  const url = new URL(location.href);
  if (value) url.searchParams.set(name, value); else url.searchParams.delete(name);
  history.replaceState(null, '', url);
}
async function getJson(path) {
  const res = await fetch(path, { headers: { accept: 'application/json' }, cache: 'no-store' });
  if (res.status === 401) throw new Error('signed out: open the URL that llmq dashboard printed');
  const body = await res.json();
  if (res.status === 404 && body.queues) queue = '';
  if (!res.ok) throw new Error((body.error && body.error.message) || 'HTTP ' + res.status);
  return body;
}
let pollTimer;
function poller(load, everyMs) {
  const status = $('status');
  async function tick() {
    clearTimeout(pollTimer);
    try {
      await load();
      status.textContent = 'live \\u00b7 ' + clock(Date.now());
      status.className = 'status';
      document.body.dataset.updated = String(Date.now());
    } catch (err) {
      status.textContent = String(err.message || err);
      status.className = 'status error';
    } finally {
      pollTimer = setTimeout(tick, everyMs);
    }
  }
  $('queue-select').addEventListener('change', (e) => { queue = e.target.value; setParam('queue', queue); tick(); });
  return tick;
}
`;
