/**
 * The overview, the dashboard's first page: the fleet's throughput, waits, the provider's 429s
 * (apart from llmq's own deferrals), spend and the backlog with its forecast, over 15 min, 1 h
 * or 24 h, then the same per tenant and per model, and spend against budgets. It polls
 * `api/overview`.
 */

import { CHART_SCRIPT, figure, useFigure, useNote } from './chart-script.ts';
import { pageHtml, RANGE_PICKER } from './page-shell.ts';
import { HISTORY_SCRIPT } from './usage-script.ts';

const tile = (title: string, value: string, note: string) =>
  `<div class="tile"><h3>${title}</h3><b>${value}</b><small>${note}</small></div>`;
const span = (id: string, text = '&ndash;') =>
  `<span id="${id}" data-testid="${id}">${text}</span>`;

const BODY = `
<div class="toolbar">${RANGE_PICKER} <span class="note" id="range-note" data-testid="range-note"></span></div>
<p id="empty" data-testid="empty" class="empty" hidden>No queue is registered under this prefix yet: enqueue a job or start a worker, and it appears here.</p>
<div id="view" hidden>
  <h2>The fleet <small id="fleet-note"></small></h2>
  <section class="tiles">
    ${tile('Calls', span('calls'), `${span('failed', '0')} failed tries &middot; ${span('throughput')}`)}
    ${tile('Wait p50 / p95', `${span('wait-p50')} / ${span('wait-p95')}`, 'from enqueue (or the previous try) to the call')}
    ${tile('Latency p50 / p95', `${span('latency-p50')} / ${span('latency-p95')}`, 'successful calls, request to whole response')}
    ${tile('429s from the provider', span('provider-429'), `deferrals, not 429s: ${span('deferred', '0')} (calls that first waited for llmq's own limits)`)}
    ${tile('Spend', span('spend'), `${span('spend-note', 'in the range')}`)}
    ${tile('Backlog', span('backlog'), `jobs waiting; ${span('eta')}`)}
    ${tile('Dead letters', span('dead-letters'), `<a href="./" id="dead-link" data-testid="dead-link">in Bull Board</a>`)}
  </section>
  ${useNote('chart-use', 'No global limit is configured and the provider has sent no reading yet: there is no use against limits to draw.')}
  <div class="charts">
    ${figure('chart-calls', 'Throughput', 'calls per bucket')}
    ${figure('chart-tokens', 'Tokens', 'per bucket')}
    ${figure('chart-wait', 'Wait', 'p50 and p95 of each bucket')}
    ${figure('chart-latency', 'Latency', 'p50 and p95 of successful calls')}
    ${useFigure('chart-use')}
    ${figure('chart-limits', '429s and deferrals', 'refused by the provider, or held back by llmq before sending')}
    ${figure('chart-spend', 'Spend', 'per bucket')}
    ${figure('chart-backlog', 'Backlog', 'jobs waiting, seen by each write of the workers')}
    ${figure('chart-gate', 'Why calls waited at the gate', 'summed waits by reason')}
  </div>
  <h2>Tenants <small>over the range; a name opens its page and its jobs</small></h2>
  <table class="usage">${'<thead><tr><th>tenant</th><th class="n">calls</th><th class="n">failed</th><th class="n">input</th><th class="n">output</th><th class="n">spend</th><th class="n">wait p50</th><th class="n">wait p95</th><th class="n">latency p50</th><th class="n">latency p95</th></tr></thead>'}
    <tbody id="tenant-rows" data-testid="tenant-rows"></tbody></table>
  <h2>Models <small>over the range</small></h2>
  <table class="usage">${'<thead><tr><th>model</th><th class="n">calls</th><th class="n">failed</th><th class="n">input</th><th class="n">output</th><th class="n">spend</th><th class="n">wait p50</th><th class="n">wait p95</th><th class="n">latency p50</th><th class="n">latency p95</th></tr></thead>'}
    <tbody id="model-rows" data-testid="model-rows"></tbody></table>
  <h2>Budgets <small>spend this UTC day and month against each budget</small></h2>
  <table class="usage"><thead><tr><th>budget</th><th>period</th><th class="n">spent</th><th class="n">budget</th><th class="bar-cell">use</th><th>resets</th></tr></thead>
    <tbody id="budget-rows" data-testid="budget-rows"></tbody></table>
  <p class="note">Budgets count what the limiter holds: a call that failed once it may have reached the provider keeps its worst case, so the spend against a budget can be above the spend of the calls shown above.</p>
</div>`;

const SCRIPT = `
function fleetTiles(v) {
  const t = v.fleet.total;
  const minutes = (v.to - v.from) / 60000;
  set('calls', t.calls);
  set('failed', t.failed);
  const perMinute = t.calls / minutes;
  set('throughput', perMinute, perMinute >= 1 ? perMinute.toFixed(1) + ' calls a minute' : (perMinute * 60).toFixed(1) + ' calls an hour');
  set('wait-p50', t.wait.p50, ms(t.wait.p50));
  set('wait-p95', t.wait.p95, ms(t.wait.p95));
  set('latency-p50', t.latency.p50, ms(t.latency.p50));
  set('latency-p95', t.latency.p95, ms(t.latency.p95));
  set('provider-429', t.providerRateLimited);
  $('provider-429').className = t.providerRateLimited > 0 ? 'bad' : '';
  set('deferred', t.deferred);
  set('spend', t.spendUsd, usd(t.spendUsd));
  const today = v.spend.lines.find((l) => l.name === 'global' && l.period === 'day');
  set('spend-note', null, v.spend.configured && today
    ? 'in the range; today ' + usd(today.spentUsd) + (today.limitUsd !== undefined ? ' of ' + usd(today.limitUsd) : '')
    : 'in the range, at list price');
  const c = v.current;
  set('backlog', c.waiting);
  set('eta', c.forecast.drainMs, c.waiting === 0 ? 'nothing to drain'
    : c.forecast.binding ? 'all started within ' + ms(c.forecast.drainMs) + ' at the current limits (' + c.forecast.binding + ' binds)'
    : 'no limit holds them back');
  set('dead-letters', c.deadLetters);
  $('dead-link').href = 'queue/' + encodeURIComponent(queue + '-dead');
}
function fleetCharts(v) {
  const p = v.fleet.points;
  const base = { bucketMs: v.bucketMs, from: v.from };
  usageCharts(v, p, base);
  useChart('chart-use', v, p, base, v.limits);
  chart('chart-limits', { ...base, format: compact, series: [
    { key: 'providerRateLimited', label: '429s from the provider', cls: 's5', values: p.map((x) => x.providerRateLimited) },
    { key: 'deferred', label: "calls held back by llmq's own limits (deferrals, no 429)", cls: 's4', values: p.map((x) => x.deferred) }] });
  chart('chart-backlog', { ...base, format: compact, series: [
    { key: 'backlogPeak', label: 'most jobs waiting in the bucket', cls: 's2', values: p.map((x) => x.backlogPeak) },
    { key: 'backlog', label: 'at its end', kind: 'line', cls: 's1', values: p.map((x) => x.backlog) }] });
  chart('chart-gate', { ...base, stack: true, format: ms, series: [
    { key: 'budget', label: 'budget (tokens, requests, money)', cls: 's0', values: p.map((x) => x.gateMs.budget) },
    { key: 'paused', label: 'provider (pause after a 429, breaker)', cls: 's5', values: p.map((x) => x.gateMs.paused) },
    { key: 'concurrency', label: 'concurrency', cls: 's2', values: p.map((x) => x.gateMs.concurrency) },
    { key: 'queued', label: 'behind another waiter', cls: 's4', values: p.map((x) => x.gateMs.queued) }] });
}
function labelRows(id, rows, page, why) {
  $(id).replaceChildren(...(rows.length === 0 ? [emptyRow(10, why, id + '-empty')] : rows.map((r) => {
    const t = r.total;
    const tr = cellRow([{ text: r.name, href: page + '?queue=' + encodeURIComponent(queue) + '&name=' + encodeURIComponent(r.name) + '&range=' + range },
      { text: num.format(t.calls), cls: 'n' }, { text: num.format(t.failed), cls: 'n' }, { text: compact(t.inputTokens), cls: 'n' },
      { text: compact(t.outputTokens), cls: 'n' }, { text: usd(t.spendUsd), cls: 'n' }, { text: ms(t.wait.p50), cls: 'n' },
      { text: ms(t.wait.p95), cls: 'n' }, { text: ms(t.latency.p50), cls: 'n' }, { text: ms(t.latency.p95), cls: 'n' }]);
    tr.dataset.name = r.name;
    tr.dataset.calls = String(t.calls);
    tr.dataset.spendUsd = String(t.spendUsd);
    return tr;
  })));
}
function render(body) {
  const v = showView(body);
  if (!v) return;
  rangeNote(v);
  fleetTiles(v);
  fleetCharts(v);
  labelRows('tenant-rows', v.tenants, 'tenant', 'No tenant made a call in this range (jobs without a tenant count under the fleet only).');
  labelRows('model-rows', v.models, 'model', 'No call in this range.');
  budgetRows(v.spend, null);
}
const tickOverview = poller(async () => {
  const body = await getJson('api/overview?range=' + range + (queue ? '&queue=' + encodeURIComponent(queue) : ''));
  if (!queue && body.queue) queue = body.queue;
  render(body);
}, 5000);
rangeButtons(tickOverview);
tickOverview();
`;

/** The overview page, with `nonce` allowing its inline script and style under the page's CSP. */
export function overviewPage(nonce: string, readOnly: boolean): string {
  return pageHtml({
    nonce,
    title: 'Overview',
    current: 'overview',
    readOnly,
    body: BODY,
    script: CHART_SCRIPT + HISTORY_SCRIPT + SCRIPT,
  });
}
