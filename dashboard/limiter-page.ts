/**
 * The limiter's live page: the shared pause, the breaker, slots, the pool's deployments (each
 * with its use, pause, breaker and calls), the current window's use against each limit with the
 * provider's view, what settled calls were estimated at and used, spend against budgets, and
 * the backlog's forecast. It polls `api/limiter` every second.
 * Deferrals (llmq's own limits holding a call back, nothing sent) are counted apart from the
 * 429s the provider sent.
 */

import { DEPLOYMENT_OUTCOMES } from '../shared/metrics.ts';
import { CHART_SCRIPT, figure } from './chart-script.ts';
import { LIMITS_HEAD, LIMITS_SCRIPT } from './limits-script.ts';
import { pageHtml } from './page-shell.ts';
import { HISTORY_SCRIPT } from './usage-script.ts';

const span = (id: string, text = '0') => `<span id="${id}" data-testid="${id}">${text}</span>`;

const TILES = `
<section class="tiles">
  <div class="tile"><h3>Shared pause</h3><b id="pause-state" data-testid="pause-state">&ndash;</b>
    <small id="pause-idle">no 429 with retry-after is being waited out</small>
    <small id="pause-detail" hidden>every worker waits ${span('pause-remaining', '&ndash;')} more, until ${span('pause-until', '&ndash;')}</small></div>
  <div class="tile"><h3>Circuit breaker</h3><b id="breaker-state" data-testid="breaker-state">&ndash;</b>
    <small>${span('breaker-failures')} consecutive failures<span id="breaker-detail" hidden>; a trial call in ${span('breaker-remaining', '&ndash;')}</span></small></div>
  <div class="tile"><h3>Slots in flight</h3><b>${span('slots-in-flight')} / ${span('slots-cap', '&infin;')}</b>
    <small>${span('waiters')} waiting for budget or a slot</small></div>
  <div class="tile"><h3>Queue depth</h3><b>${span('depth-waiting')} / ${span('depth-bound', '&infin;')}</b>
    <small>${span('jobs-active')} active, ${span('dead-letters')} dead letters</small></div>
  <div class="tile"><h3>Redis holds</h3><b>${span('held-total', '&ndash;')}</b>
    <small>waiting ${span('held-waiting', '&ndash;')} / ${span('held-waiting-bound', '&infin;')}, running ${span('held-running', '&ndash;')}, finished ${span('held-finished', '&ndash;')} / ${span('held-finished-bound', '&infin;')}, dead ${span('held-dead', '&ndash;')} / ${span('held-dead-bound', '&infin;')}</small></div>
  <div class="tile"><h3>429s from the provider</h3><b>${span('rejected-provider')}</b>
    <small>${span('rejected-provider-retry-after')} with retry-after, ${span('rejected-provider-final')} final</small></div>
  <div class="tile"><h3>Deferrals by llmq</h3><b>${span('rejected-llmq')}</b>
    <small>admissions its own limits put off: no request was sent, no 429</small></div>
  <div class="tile"><h3>Estimate accuracy</h3>
    <b>in ${span('accuracy-input', '&ndash;')} &middot; out ${span('accuracy-output', '&ndash;')}</b>
    <small>actual / reserved over ${span('settled')} settled calls</small></div>
</section>`;

const provider = (id: string, title: string, initial = '0') =>
  `<div class="tile"><h3>${title}</h3><b id="${id}" data-testid="${id}">${initial}</b></div>`;

const BODY = `
<p id="empty" data-testid="empty" class="empty" hidden>No queue is registered under this prefix yet: enqueue a job or start a worker, and it appears here.</p>
<div id="view" hidden>
  ${TILES}
  <section id="deployments" data-testid="deployments" hidden>
  <h2>Deployments <small>each with its own limits, pause and breaker; a job goes to the first by preference that serves its model and has room</small></h2>
  <table class="usage"><thead><tr><th>deployment</th><th>used / limit this window</th><th>pause</th><th>breaker</th><th>calls</th></tr></thead>
    <tbody id="deployment-rows" data-testid="deployment-rows"></tbody></table>
  </section>
  <h2>Current window (${span('window-seconds', '&ndash;')} s) <small>used: open calls at their reservation, settled ones at their usage; never above the limit</small></h2>
  <table class="usage">${LIMITS_HEAD}<tbody id="usage-rows" data-testid="usage-rows"></tbody></table>
  <h2>Spend <small>this UTC day and month, by budget and model</small></h2>
  <table class="usage"><thead><tr><th>budget or model</th><th>period</th><th class="n">spent</th><th class="n">budget</th><th class="bar-cell">use</th><th>resets</th></tr></thead>
    <tbody id="budget-rows" data-testid="budget-rows"></tbody></table>
  <h2>Last 15 minutes</h2>
  <div class="charts">
    ${figure('chart', 'Settled calls: estimate and usage', 'tokens per 10 s; what the estimate held beyond the usage went back to the budget')}
  </div>
  <h2>Forecast <small>when the waiting jobs will have started at the current limits</small></h2>
  <table class="usage"><thead><tr><th>priority</th><th class="n">jobs</th><th class="n">started within</th><th>bound by</th></tr></thead>
    <tbody id="forecast-rows" data-testid="forecast-rows"></tbody></table>
  <h2>Provider</h2>
  <section class="tiles small">
    ${provider('provider-calls', 'calls')}${provider('provider-ok', 'ok')}${provider('provider-5xx', '5xx / 529')}
    ${provider('provider-4xx', '4xx')}${provider('provider-connection-errors', 'connection errors')}${provider('provider-retries', 'retries')}
    ${provider('provider-latency-mean', 'mean latency', '&ndash;')}
    <div class="tile"><h3>tokens in / out</h3><b>${span('provider-tokens-in')} / ${span('provider-tokens-out')}</b></div>
  </section>
</div>`;

const SCRIPT = `
function seconds(v) { return v >= 10000 ? Math.round(v / 1000) + ' s' : (v / 1000).toFixed(1) + ' s'; }
function settledChart(v) {
  const h = v.history;
  const reserved = h.points.map((p) => p.reservedIn + p.reservedOut);
  const actual = h.points.map((p) => p.actualIn + p.actualOut);
  chart('chart', { bucketMs: h.bucketMs, from: h.from, format: compact, series: [
    { key: 'reserved', label: 'reserved at admission (the estimate)', cls: 'reserved', values: reserved },
    { key: 'actual', label: 'used (the provider\\'s usage)', cls: 's0', values: actual }] });
  $('chart').dataset.buckets = String(actual.filter((a, i) => a > 0 || reserved[i] > 0).length);
}
function forecast(f) {
  const rows = f.classes.map((c) => {
    const tr = cellRow([c.lane ? c.lane + ' (' + c.priority + ')' : String(c.priority), { text: num.format(c.jobs), cls: 'n' },
      { text: c.binding ? seconds(c.drainMs) : 'now', cls: 'n' }, c.binding || '\\u2013']);
    tr.dataset.priority = String(c.priority);
    tr.dataset.drainMs = String(c.drainMs);
    tr.dataset.binding = c.binding || '';
    return tr;
  });
  $('forecast-rows').replaceChildren(...(rows.length ? rows : [emptyRow(4, 'nothing waiting')]));
}
function tiles(v) {
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
  const h = v.held;
  set('held-total', h.waiting + h.running + h.finished + h.dead, bytes(h.waiting + h.running + h.finished + h.dead));
  for (const s of ['waiting', 'running', 'finished', 'dead']) set('held-' + s, h[s], bytes(h[s]));
  for (const s of ['waiting', 'finished', 'dead']) {
    const b = h.bounds[s] || 0;
    set('held-' + s + '-bound', b, b > 0 ? bytes(b) : '\u221e');
  }
  set('rejected-llmq', v.rateLimited.llmq);
  set('rejected-provider', v.rateLimited.provider);
  $('rejected-provider').className = v.rateLimited.provider > 0 ? 'bad' : '';
  set('rejected-provider-retry-after', v.rateLimited.providerRetryAfter);
  set('rejected-provider-final', v.rateLimited.providerFinal);
  set('accuracy-input', v.accuracy.input, pct(v.accuracy.input));
  set('accuracy-output', v.accuracy.output, pct(v.accuracy.output));
  set('settled', v.counters.settled);
}
function deploymentUse(scope) {
  const parts = LIMIT_DIMS.flatMap(([dim, label]) => {
    const u = scope.dimensions[dim];
    const limit = u.limit !== undefined ? u.limit : u.providerLimit;
    if (limit === undefined && u.used === 0) return [];
    return [label + ' ' + compact(u.used) + ' / ' + (limit === undefined ? '\u221e' : compact(limit))];
  });
  return parts.length ? parts.join(', ') : 'no use, no limits';
}
function deploymentCalls(c) {
  if (!c || !c.calls) return 'none yet';
  const by = ${JSON.stringify(DEPLOYMENT_OUTCOMES)}.filter((o) => c[o] > 0).map((o) => c[o] + ' ' + o.replace('_', ' '));
  return c.calls + ' (' + by.join(', ') + ')';
}
function deployments(list) {
  $('deployments').hidden = list.length === 0;
  $('deployment-rows').replaceChildren(...list.map((d) => {
    const paused = d.pause.until !== null;
    const b = d.breaker;
    const breaker = b.state.replace('_', '-') + (b.state === 'open' ? ', trial call in ' + seconds(b.remainingMs) : '') +
      (b.failures ? ' (' + b.failures + ' failures)' : '');
    const tr = cellRow([d.name, deploymentUse(d.scope), paused ? 'paused, ' + seconds(d.pause.remainingMs) + ' more' : 'none', breaker, deploymentCalls(d.calls)]);
    tr.dataset.testid = 'deployment-' + d.name;
    tr.dataset.paused = String(paused);
    tr.dataset.breaker = b.state;
    if (paused || b.state !== 'closed') tr.className = 'bad';
    return tr;
  }));
}
function providerTiles(p) {
  set('provider-calls', p.calls);
  set('provider-ok', p.ok);
  set('provider-5xx', p.serverErrors);
  set('provider-4xx', p.clientErrors);
  set('provider-connection-errors', p.connectionErrors);
  set('provider-retries', p.retries);
  const mean = p.latency.count > 0 ? p.latency.sumMs / p.latency.count : null;
  set('provider-latency-mean', mean, ms(mean));
  set('provider-tokens-in', p.tokensIn);
  set('provider-tokens-out', p.tokensOut);
}
function render(data) {
  const v = showView(data);
  if (!v) return;
  tiles(v);
  deployments(v.deployments || []);
  limitRows('usage-rows', v.scopes, 'No limit is configured and the provider has sent no reading yet.');
  budgetRows({ configured: v.budgetsConfigured, lines: v.spend || [] }, null, true);
  settledChart(v);
  forecast(v.forecast);
  providerTiles(v.provider);
}
const tickLimiter = poller(async () => {
  const body = await getJson('api/limiter' + (queue ? '?queue=' + encodeURIComponent(queue) : ''));
  if (!queue && body.view) queue = body.view.queue;
  render(body);
}, 1000);
tickLimiter();
`;

/** The page, with `nonce` allowing its inline script and style under the page's CSP. */
export function limiterPage(nonce: string, readOnly = false): string {
  return pageHtml({
    nonce,
    title: 'Limiter',
    current: 'limiter',
    readOnly,
    body: BODY,
    script: CHART_SCRIPT + HISTORY_SCRIPT + LIMITS_SCRIPT + SCRIPT,
  });
}
