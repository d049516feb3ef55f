/**
 * One tenant's or one model's page: its calls, waits, latency and spend over the range, its use
 * against its scope's limits and its budget, and for a tenant its latest jobs, each linked to
 * its page in Bull Board. It polls `api/usage`.
 */

import { CHART_SCRIPT, figure, useFigure } from './chart-script.ts';
import { LIMITS_HEAD, LIMITS_SCRIPT } from './limits-script.ts';
import { pageHtml, RANGE_PICKER } from './page-shell.ts';
import { HISTORY_SCRIPT } from './usage-script.ts';

const span = (id: string, text = '&ndash;') =>
  `<span id="${id}" data-testid="${id}">${text}</span>`;
const tile = (title: string, value: string, note: string) =>
  `<div class="tile"><h3>${title}</h3><b>${value}</b><small>${note}</small></div>`;

const BODY = `
<div class="toolbar">${RANGE_PICKER} <span class="note" id="range-note" data-testid="range-note"></span></div>
<p id="empty" data-testid="empty" class="empty" hidden>No queue is registered under this prefix yet.</p>
<div id="view" hidden>
  <p id="unknown" data-testid="unknown" class="note" hidden></p>
  <section class="tiles">
    ${tile('Calls', span('calls'), `${span('failed', '0')} failed tries`)}
    ${tile('Wait p50 / p95', `${span('wait-p50')} / ${span('wait-p95')}`, 'from enqueue (or the previous try) to the call')}
    ${tile('Latency p50 / p95', `${span('latency-p50')} / ${span('latency-p95')}`, 'successful calls')}
    ${tile('Tokens in / out', `${span('tokens-in')} / ${span('tokens-out')}`, 'input: uncached and cache writes')}
    ${tile('Spend', span('spend'), 'in the range')}
    ${tile('Deferrals', span('deferred'), "calls that first waited for llmq's own limits (no 429)")}
  </section>
  <h2>Limits <small id="scope-note"></small></h2>
  <table class="usage">${LIMITS_HEAD}<tbody id="limit-rows" data-testid="limit-rows"></tbody></table>
  <div class="charts">
    ${useFigure('chart-use')}
    ${figure('chart-calls', 'Calls', 'per bucket')}
    ${figure('chart-tokens', 'Tokens', 'per bucket')}
    ${figure('chart-wait', 'Wait', 'p50 and p95 of each bucket')}
    ${figure('chart-latency', 'Latency', 'p50 and p95 of successful calls')}
    ${figure('chart-spend', 'Spend', 'per bucket')}
  </div>
  <h2>Budget <small>spend this UTC day and month</small></h2>
  <table class="usage"><thead><tr><th>budget</th><th>period</th><th class="n">spent</th><th class="n">budget</th><th class="bar-cell">use</th><th>resets</th></tr></thead>
    <tbody id="budget-rows" data-testid="budget-rows"></tbody></table>
  <p class="note">Budgets count what the limiter holds: a call that failed once it may have reached the provider keeps its worst case, so this can be above the spend of the calls shown above.</p>
  <section id="jobs" hidden>
    <h2>Latest tries <small>the last 20 tries of this tenant's jobs; a job opens in Bull Board</small></h2>
    <table class="usage"><thead><tr><th>job</th><th>outcome</th><th>at</th><th>model</th></tr></thead>
      <tbody id="finished-rows" data-testid="finished-rows"></tbody></table>
    <h2>Under way and waiting <small id="pending-note"></small></h2>
    <table class="usage"><thead><tr><th>job</th><th>state</th><th>enqueued</th><th>model</th></tr></thead>
      <tbody id="pending-rows" data-testid="pending-rows"></tbody></table>
  </section>
</div>`;

const SCRIPT = `
const kind = location.pathname.endsWith('/model') ? 'model' : 'tenant';
const name = params.get('name') || '';
document.title = 'llmq \\u00b7 ' + kind + ' ' + name;
$('title').textContent = kind + ' ' + name;
function jobLink(id, dead) {
  return { text: id, href: 'queue/' + encodeURIComponent(dead ? queue + '-dead' : queue) + '/' + encodeURIComponent(id) };
}
function jobRows(j) {
  $('jobs').hidden = j === null;
  if (!j) return;
  // Newest first: a failed try with a later one of its job was tried again.
  const later = new Set();
  const outcome = (t) => {
    const again = later.has(t.id);
    later.add(t.id);
    return t.ok ? 'succeeded' : again ? 'failed, tried again' : t.deadLetter ? 'failed: dead letter' : 'failed, not tried again yet';
  };
  $('finished-rows').replaceChildren(...(j.finished.length === 0 ? [emptyRow(4, 'No try of this tenant finished while the history kept it.', 'finished-rows-empty')]
    : j.finished.map((t) => {
      const tr = cellRow([jobLink(t.id, t.deadLetter), outcome(t), new Date(t.at).toLocaleString(), t.model]);
      tr.dataset.job = t.id;
      return tr;
    })));
  $('pending-note').textContent = j.total === 0 ? 'the queue has none' : 'among the first ' + num.format(j.scanned) + ' of the ' + num.format(j.total) + ' jobs under way, waiting or delayed';
  $('pending-rows').replaceChildren(...(j.pending.length === 0 ? [emptyRow(4, 'None of this tenant\\'s jobs among them.', 'pending-rows-empty')]
    : j.pending.map((p) => cellRow([jobLink(p.id, false), p.state, p.enqueuedAt ? new Date(p.enqueuedAt).toLocaleString() : '\\u2013', p.model || '\\u2013']))));
}
function tiles(t) {
  set('calls', t.calls);
  set('failed', t.failed);
  set('wait-p50', t.wait.p50, ms(t.wait.p50));
  set('wait-p95', t.wait.p95, ms(t.wait.p95));
  set('latency-p50', t.latency.p50, ms(t.latency.p50));
  set('latency-p95', t.latency.p95, ms(t.latency.p95));
  set('tokens-in', t.inputTokens, compact(t.inputTokens));
  set('tokens-out', t.outputTokens, compact(t.outputTokens));
  set('spend', t.spendUsd, usd(t.spendUsd));
  set('deferred', t.deferred);
}
function render(body) {
  const v = showView(body);
  if (!v) return;
  rangeNote(v);
  $('unknown').hidden = v.known;
  $('unknown').textContent = 'The history keeps no call of ' + kind + ' ' + name + ' in queue ' + queue + ' (past 20 tenants or 10 models, the rest count as (other)).';
  tiles(v.total);
  const s = v.scope.snapshot;
  $('scope-note').textContent = s ? 'scope ' + s.scope + ', its window now' : '';
  limitRows('limit-rows', s ? [s] : [], kind === 'tenant'
    ? 'No limit is configured for ' + v.scope.name + ', and no provider reading applies to it: only the global limits hold its calls.'
    : 'No model scope matches ' + name + ': only the global limits hold its calls.');
  const base = { bucketMs: v.bucketMs, from: v.from };
  useChart('chart-use', v, v.points, base, s);
  usageCharts(v, v.points, base);
  budgetRows(v.budgets, v.budgets.budget);
  jobRows(v.jobs);
}
const tickUsage = poller(async () => {
  const body = await getJson('api/usage?kind=' + kind + '&name=' + encodeURIComponent(name) + '&range=' + range + (queue ? '&queue=' + encodeURIComponent(queue) : ''));
  if (!queue && body.queue) queue = body.queue;
  render(body);
}, 5000);
rangeButtons(tickUsage);
tickUsage();
`;

/** The page of a tenant (`/tenant?name=`) or a model (`/model?name=`). */
export function usagePage(nonce: string, kind: 'tenant' | 'model', readOnly: boolean): string {
  return pageHtml({
    nonce,
    title: kind,
    current: kind,
    readOnly,
    body: BODY,
    script: CHART_SCRIPT + HISTORY_SCRIPT + LIMITS_SCRIPT + SCRIPT,
  });
}
