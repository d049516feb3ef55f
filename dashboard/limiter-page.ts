/**
 * The limiter's live page: one self-contained HTML document (inline CSS and JS, an inline SVG
 * chart, nothing fetched from elsewhere) that polls `api/limiter` every second. Every number has
 * a stable id, the same `data-testid`, and its raw value in `data-value`, so a browser test can
 * read it. Dynamic text is only ever set with `textContent`: names from Redis are not markup.
 */

import { DIMENSIONS } from '../shared/dimensions.ts';

/** The page, with `nonce` allowing its inline script and style under the page's CSP. */
export function limiterPage(nonce: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>llmq · limiter</title>
<style nonce="${nonce}">${STYLE}</style>
</head>
<body>
<header>
  <a href="./" id="back" data-testid="back">&larr; Bull Board</a>
  <h1>llmq limiter</h1>
  <label class="pick">queue <select id="queue-select" data-testid="queue-select"></select></label>
  <span id="status" data-testid="status" class="status">connecting&hellip;</span>
</header>
<main>
  <p id="empty" data-testid="empty" class="empty" hidden>No queue is registered under this prefix yet: enqueue a job or start a worker, and it appears here.</p>
  <div id="view" hidden>
    <section class="tiles">
      <div class="tile"><h3>Shared pause</h3>
        <b id="pause-state" data-testid="pause-state">&ndash;</b>
        <small id="pause-idle">no 429 with retry-after is being waited out</small>
        <small id="pause-detail" hidden>every worker waits <span id="pause-remaining" data-testid="pause-remaining">&ndash;</span> more, until <span id="pause-until" data-testid="pause-until">&ndash;</span></small>
</div>
      <div class="tile"><h3>Circuit breaker</h3>
        <b id="breaker-state" data-testid="breaker-state">&ndash;</b>
        <small><span id="breaker-failures" data-testid="breaker-failures">0</span> consecutive failures<span id="breaker-detail" hidden>; a trial call in <span id="breaker-remaining" data-testid="breaker-remaining">&ndash;</span></span></small></div>
      <div class="tile"><h3>Slots in flight</h3>
        <b><span id="slots-in-flight" data-testid="slots-in-flight">0</span> / <span id="slots-cap" data-testid="slots-cap">&infin;</span></b>
        <small><span id="waiters" data-testid="waiters">0</span> waiting for budget or a slot</small></div>
      <div class="tile"><h3>Queue depth</h3>
        <b><span id="depth-waiting" data-testid="depth-waiting">0</span> / <span id="depth-bound" data-testid="depth-bound">&infin;</span></b>
        <small><span id="jobs-active" data-testid="jobs-active">0</span> active, <span id="dead-letters" data-testid="dead-letters">0</span> dead letters</small></div>
      <div class="tile"><h3>429s</h3>
        <b><span id="rejected-llmq" data-testid="rejected-llmq">0</span> by llmq</b>
        <small><span id="rejected-provider" data-testid="rejected-provider">0</span> from the provider (<span id="rejected-provider-retry-after" data-testid="rejected-provider-retry-after">0</span> with retry-after, <span id="rejected-provider-final" data-testid="rejected-provider-final">0</span> final)</small></div>
      <div class="tile"><h3>Estimate accuracy</h3>
        <b>in <span id="accuracy-input" data-testid="accuracy-input">&ndash;</span> &middot; out <span id="accuracy-output" data-testid="accuracy-output">&ndash;</span></b>
        <small>actual / reserved over <span id="settled" data-testid="settled">0</span> settled calls</small></div>
    </section>
    <h2>Current window (<span id="window-seconds" data-testid="window-seconds">&ndash;</span> s)</h2>
    <table class="usage"><thead><tr><th>scope</th><th>dimension</th><th class="n">used</th><th class="n">limit</th><th class="bar-cell">use</th><th class="n">foreign</th></tr></thead>
      <tbody id="usage-rows" data-testid="usage-rows"></tbody></table>
    <h2>Spend <small>this UTC day and month, by budget and model</small></h2>
    <table class="usage"><thead><tr><th>budget or model</th><th>period</th><th class="n">spent</th><th class="n">budget</th><th>resets</th></tr></thead>
      <tbody id="spend-rows" data-testid="spend-rows"></tbody></table>
    <h2>Last 15 minutes <small>tokens per 10 s: <i class="key reserved"></i> reserved <i class="key actual"></i> actual <i class="key limit"></i> limit (pro rata)</small></h2>
    <svg id="chart" data-testid="chart" viewBox="0 0 960 240" role="img" aria-label="tokens reserved and actual per 10 seconds over the last 15 minutes"></svg>
    <h2>Forecast <small>when the waiting jobs will have started at the current limits</small></h2>
    <table class="usage"><thead><tr><th>priority</th><th class="n">jobs</th><th class="n">started within</th><th>bound by</th></tr></thead>
      <tbody id="forecast-rows" data-testid="forecast-rows"></tbody></table>
    <h2>Provider</h2>
    <section class="tiles small">
      <div class="tile"><h3>calls</h3><b id="provider-calls" data-testid="provider-calls">0</b></div>
      <div class="tile"><h3>ok</h3><b id="provider-ok" data-testid="provider-ok">0</b></div>
      <div class="tile"><h3>5xx / 529</h3><b id="provider-5xx" data-testid="provider-5xx">0</b></div>
      <div class="tile"><h3>4xx</h3><b id="provider-4xx" data-testid="provider-4xx">0</b></div>
      <div class="tile"><h3>connection errors</h3><b id="provider-connection-errors" data-testid="provider-connection-errors">0</b></div>
      <div class="tile"><h3>retries</h3><b id="provider-retries" data-testid="provider-retries">0</b></div>
      <div class="tile"><h3>mean latency</h3><b id="provider-latency-mean" data-testid="provider-latency-mean">&ndash;</b></div>
      <div class="tile"><h3>tokens in / out</h3><b><span id="provider-tokens-in" data-testid="provider-tokens-in">0</span> / <span id="provider-tokens-out" data-testid="provider-tokens-out">0</span></b></div>
    </section>
  </div>
</main>
<script nonce="${nonce}">${SCRIPT}</script>
</body>
</html>
`;
}

const STYLE = `
:root { --bg:#f6f7f9; --fg:#1c2430; --muted:#667085; --card:#fff; --line:#e4e7ec; --accent:#3b6fd8;
  --reserved:#b8c9ef; --actual:#3b6fd8; --limit:#d92d20; --warn:#dc6803; --ok:#12b76a; }
@media (prefers-color-scheme: dark) { :root { --bg:#151a21; --fg:#e6e9ef; --muted:#98a2b3; --card:#1e2530;
  --line:#2c3543; --reserved:#3d4f73; --actual:#7aa2f7; } }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; background:var(--bg); color:var(--fg); }
header { display:flex; gap:1.2rem; align-items:center; padding:.7rem 1.2rem; background:var(--card); border-bottom:1px solid var(--line); }
header h1 { font-size:1.05rem; margin:0; }
header a { color:var(--accent); text-decoration:none; }
.pick select { margin-left:.3rem; font:inherit; padding:.15rem .3rem; }
.status { margin-left:auto; color:var(--muted); font-size:.85rem; }
.status.error { color:var(--limit); }
main { padding:1rem 1.2rem 2rem; max-width:1200px; }
h2 { font-size:.95rem; margin:1.4rem 0 .5rem; }
h2 small { font-weight:normal; color:var(--muted); margin-left:.6rem; }
.tiles { display:grid; grid-template-columns:repeat(auto-fill, minmax(230px, 1fr)); gap:.7rem; }
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
.bar-cell { width:30%; }
.bar { height:.6rem; background:var(--line); border-radius:3px; overflow:hidden; display:flex; }
.bar span { display:block; height:100%; background:var(--actual); }
.bar span.foreign { background:var(--warn); }
.bar.hot span { background:var(--warn); }
svg { width:100%; height:auto; background:var(--card); border:1px solid var(--line); border-radius:8px; }
svg text { fill:var(--muted); font-size:11px; }
svg .grid { stroke:var(--line); }
svg .reserved { fill:var(--reserved); }
svg .actual { fill:var(--actual); }
svg .limit { stroke:var(--limit); stroke-dasharray:6 4; stroke-width:1.5; }
.key { display:inline-block; width:.8rem; height:.6rem; margin:0 .2rem 0 .6rem; vertical-align:baseline; }
.key.reserved { background:var(--reserved); } .key.actual { background:var(--actual); }
.key.limit { border-top:2px dashed var(--limit); height:0; }
.empty { color:var(--muted); }
`;

// Plain ES2020 in the browser; no build step.
const SCRIPT = `
'use strict';
const DIMS = ${JSON.stringify(DIMENSIONS.map((d) => [d.name, d.label]))};
const $ = (id) => document.getElementById(id);
const num = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
let queue = new URLSearchParams(location.search).get('queue') || '';
let timer;

function set(id, value, text) {
  const el = $(id);
  if (!el) return;
  el.dataset.value = value === null || value === undefined ? '' : String(value);
  el.textContent = text !== undefined ? text : value === null || value === undefined ? '\\u2013' : num.format(value);
}
function seconds(ms) { return ms >= 10000 ? Math.round(ms / 1000) + ' s' : (ms / 1000).toFixed(1) + ' s'; }
function pct(r) { return r === null ? '\\u2013' : Math.round(r * 100) + '%'; }
function clock(ms) { return new Date(ms).toLocaleTimeString(); }

function queues(list) {
  const sel = $('queue-select');
  const have = Array.from(sel.options).map((o) => o.value).join('\\n');
  if (have !== list.join('\\n')) {
    sel.replaceChildren(...list.map((q) => { const o = document.createElement('option'); o.value = q; o.textContent = q; return o; }));
  }
  sel.value = queue;
}

function row(scope, dim, label, use) {
  const id = 'use-' + scope + '-' + dim;
  const tr = document.createElement('tr');
  tr.id = id;
  tr.dataset.testid = id;
  const cell = (cls, key) => {
    const td = document.createElement('td');
    if (cls) td.className = cls;
    if (key) { td.id = id + '-' + key; td.dataset.testid = td.id; }
    tr.appendChild(td);
    return td;
  };
  cell('', '').textContent = scope;
  cell('', '').textContent = label;
  cell('n', 'used');
  cell('n', 'limit');
  const bar = document.createElement('div');
  bar.className = 'bar';
  bar.id = id + '-bar';
  bar.append(document.createElement('span'), document.createElement('span'));
  bar.lastChild.className = 'foreign';
  cell('bar-cell', '').appendChild(bar);
  cell('n', 'foreign');
  return tr;
}

function spend(lines) {
  const money = (usd) => '$' + usd.toFixed(4);
  $('spend-rows').replaceChildren(...lines.map((l) => {
    const tr = document.createElement('tr');
    for (const [text, cls] of [[l.name], [l.period], [money(l.spentUsd), 'n'], [l.limitUsd === undefined ? '\u2013' : money(l.limitUsd), 'n'], [new Date(l.resetsAt).toISOString()]]) {
      const td = document.createElement('td');
      td.textContent = text;
      if (cls) td.className = cls;
      tr.append(td);
    }
    return tr;
  }));
}

function usage(scopes) {
  const body = $('usage-rows');
  const want = [];
  for (const s of scopes) for (const [dim, label] of DIMS) want.push([s.scope, dim, label, s.dimensions[dim]]);
  const ids = want.map(([s, d]) => 'use-' + s + '-' + d).join('\\n');
  if (body.dataset.rows !== ids) {
    body.replaceChildren(...want.map(([s, d, l, u]) => row(s, d, l, u)));
    body.dataset.rows = ids;
  }
  for (const [scope, dim, , u] of want) {
    const id = 'use-' + scope + '-' + dim;
    set(id + '-used', u.used);
    set(id + '-limit', u.limit === undefined ? null : u.limit, u.limit === undefined ? 'unlimited' : undefined);
    set(id + '-foreign', u.foreign);
    const bar = $(id + '-bar');
    const share = u.limit ? Math.min(1, u.used / u.limit) : 0;
    const foreign = u.limit ? Math.min(1 - share, u.foreign / u.limit) : 0;
    bar.firstChild.style.width = (share * 100).toFixed(1) + '%';
    bar.lastChild.style.width = (foreign * 100).toFixed(1) + '%';
    bar.classList.toggle('hot', share > 0.9);
    bar.title = u.limit ? pct(u.used / u.limit) + ' used' : 'unlimited';
  }
}

const SVG = 'http://www.w3.org/2000/svg';
function el(name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function chart(view) {
  const svg = $('chart');
  const W = 960, H = 240, L = 56, R = 10, T = 12, B = 26;
  const step = view.history.bucketMs;
  const n = Math.round(15 * 60000 / step);
  const last = Math.floor(view.now / step) * step;
  const byAt = new Map(view.history.points.map((p) => [p.at, p]));
  const bars = [];
  for (let i = n - 1; i >= 0; i--) {
    const p = byAt.get(last - i * step);
    bars.push(p ? [p.reservedIn + p.reservedOut, p.actualIn + p.actualOut] : [0, 0]);
  }
  const limit = view.history.limitPerBucket;
  const top = Math.max(1, ...bars.map((b) => Math.max(b[0], b[1])), limit ? limit * 1.15 : 0) * 1.05;
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const slot = (W - L - R) / n;
  const parts = [];
  for (const f of [0, 0.5, 1]) {
    parts.push(el('line', { class: 'grid', x1: L, x2: W - R, y1: y(top * f), y2: y(top * f) }));
    parts.push(el('text', { x: L - 6, y: y(top * f) + 4, 'text-anchor': 'end' }, num.format(top * f)));
  }
  bars.forEach(([reserved, actual], i) => {
    const x = L + i * slot;
    if (reserved > 0) parts.push(el('rect', { class: 'reserved', x: x + 0.5, y: y(reserved), width: Math.max(1, slot * 0.48), height: y(0) - y(reserved) }));
    if (actual > 0) parts.push(el('rect', { class: 'actual', x: x + slot * 0.48, y: y(actual), width: Math.max(1, slot * 0.48), height: y(0) - y(actual) }));
  });
  if (limit) parts.push(el('line', { class: 'limit', x1: L, x2: W - R, y1: y(limit), y2: y(limit), 'data-testid': 'chart-limit' }));
  for (const m of [15, 10, 5, 0]) {
    const x = L + (n - (m * 60000) / step) * slot;
    parts.push(el('text', { x: Math.min(x, W - R), y: H - 8, 'text-anchor': m === 0 ? 'end' : 'middle' }, m === 0 ? 'now' : '\\u2212' + m + ' min'));
  }
  svg.dataset.buckets = String(bars.filter((b) => b[0] > 0 || b[1] > 0).length);
  svg.replaceChildren(...parts);
}

function forecast(f) {
  const rows = f.classes.map((c) => {
    const tr = document.createElement('tr');
    tr.dataset.priority = String(c.priority);
    tr.dataset.drainMs = String(c.drainMs);
    tr.dataset.binding = c.binding || '';
    const cells = [c.lane ? c.lane + ' (' + c.priority + ')' : String(c.priority), num.format(c.jobs),
      c.binding ? seconds(c.drainMs) : 'now', c.binding || '\u2013'];
    cells.forEach((text, i) => {
      const td = document.createElement('td');
      td.textContent = text;
      if (i === 1 || i === 2) td.className = 'n';
      tr.append(td);
    });
    return tr;
  });
  if (rows.length === 0) {
    const tr = document.createElement('tr');
    const td = document.createElement('td');
    td.colSpan = 4;
    td.textContent = 'nothing waiting';
    tr.append(td);
    rows.push(tr);
  }
  $('forecast-rows').replaceChildren(...rows);
}

function render(data) {
  queues(data.queues);
  $('empty').hidden = data.view !== null;
  $('view').hidden = data.view === null;
  if (!data.view) return;
  const v = data.view;
  set('window-seconds', v.windowMs / 1000, String(v.windowMs / 1000));
  const paused = v.pause.until !== null;
  set('pause-state', paused ? 'paused' : 'none', paused ? 'paused' : 'none');
  $('pause-state').className = paused ? 'bad' : '';
  set('pause-remaining', v.pause.remainingMs, paused ? seconds(v.pause.remainingMs) : '\\u2013');
  set('pause-until', v.pause.until, paused ? clock(v.pause.until) : '\\u2013');
  $('pause-idle').hidden = paused;
  $('pause-detail').hidden = !paused;
  $('breaker-detail').hidden = v.breaker.state !== 'open';
  set('breaker-state', v.breaker.state, v.breaker.state.replace('_', '-'));
  $('breaker-state').className = v.breaker.state === 'open' ? 'bad' : v.breaker.state === 'half_open' ? 'hot' : '';
  set('breaker-failures', v.breaker.failures);
  set('breaker-remaining', v.breaker.remainingMs, v.breaker.state === 'open' ? seconds(v.breaker.remainingMs) : '\\u2013');
  set('slots-in-flight', v.slots.inFlight);
  set('slots-cap', v.slots.cap, v.slots.cap === null ? '\\u221e' : undefined);
  set('waiters', v.waiters);
  set('depth-waiting', v.depth.waiting);
  set('depth-bound', v.depth.bound, v.depth.bound === null ? '\\u221e' : undefined);
  set('jobs-active', v.jobs.active || 0);
  set('dead-letters', v.deadLetters);
  set('rejected-llmq', v.rateLimited.llmq);
  set('rejected-provider', v.rateLimited.provider);
  $('rejected-provider').className = v.rateLimited.provider > 0 ? 'bad' : '';
  set('rejected-provider-retry-after', v.rateLimited.providerRetryAfter);
  set('rejected-provider-final', v.rateLimited.providerFinal);
  set('accuracy-input', v.accuracy.input, pct(v.accuracy.input));
  set('accuracy-output', v.accuracy.output, pct(v.accuracy.output));
  set('settled', v.counters.settled);
  usage(v.scopes);
  forecast(v.forecast);
  spend(v.spend || []);
  chart(v);
  const p = v.provider;
  set('provider-calls', p.calls);
  set('provider-ok', p.ok);
  set('provider-5xx', p.serverErrors);
  set('provider-4xx', p.clientErrors);
  set('provider-connection-errors', p.connectionErrors);
  set('provider-retries', p.retries);
  const mean = p.latency.count > 0 ? p.latency.sumMs / p.latency.count : null;
  set('provider-latency-mean', mean, mean === null ? '\\u2013' : num.format(mean) + ' ms');
  set('provider-tokens-in', p.tokensIn);
  set('provider-tokens-out', p.tokensOut);
}

async function poll() {
  clearTimeout(timer);
  const status = $('status');
  try {
    const res = await fetch('api/limiter' + (queue ? '?queue=' + encodeURIComponent(queue) : ''), { headers: { accept: 'application/json' }, cache: 'no-store' });
    if (res.status === 401) throw new Error('signed out: open the URL that llmq dashboard printed');
    const body = await res.json();
    if (res.status === 404 && body.queues) queue = '';
    if (!res.ok) throw new Error((body.error && body.error.message) || 'HTTP ' + res.status);
    if (!queue && body.view) queue = body.view.queue;
    render(body);
    status.textContent = 'live \\u00b7 ' + clock(Date.now());
    status.className = 'status';
    document.body.dataset.updated = String(Date.now());
  } catch (err) {
    status.textContent = String(err.message || err);
    status.className = 'status error';
  } finally {
    timer = setTimeout(poll, 1000);
  }
}

$('queue-select').addEventListener('change', (e) => {
  queue = e.target.value;
  const url = new URL(location.href);
  url.searchParams.set('queue', queue);
  history.replaceState(null, '', url);
  poll();
});
poll();
`;
