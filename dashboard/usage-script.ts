/**
 * What the overview and the tenant and model pages share in the browser: the range picker, the
 * charts every history has (calls, tokens, wait, latency, spend, use against limits) and the
 * budget table. Use against a limit is drawn per window as the limiter counts it: over each
 * rolling window when buckets are shorter than the window, else per bucket against what the
 * limit allows in one (a bucket of 10 s may hold most of a 60 s window's budget: drawing the
 * limit spread over it would look like overspend when it is not).
 */

export const HISTORY_SCRIPT = `
let range = params.get('range') || '15m';
const RANGE_TEXT = { '15m': '15 minutes', '1h': 'hour', '24h': '24 hours' };
function rangeButtons(onChange) {
  const buttons = document.querySelectorAll('.ranges button');
  const mark = () => buttons.forEach((b) => b.setAttribute('aria-pressed', String(b.dataset.range === range)));
  buttons.forEach((b) => b.addEventListener('click', () => { range = b.dataset.range; setParam('range', range); mark(); onChange(); }));
  mark();
}
function rangeNote(v) {
  const size = v.bucketMs >= 60000 ? v.bucketMs / 60000 + ' min' : v.bucketMs / 1000 + ' s';
  set('range-note', v.bucketMs, 'the last ' + RANGE_TEXT[range] + ', in buckets of ' + size + ' (' + clock(v.from) + ' to now)');
}
const DIMS = [['requests', 'requests'], ['inputTokens', 'input tokens'], ['outputTokens', 'output tokens'], ['tokens', 'tokens']];
function useOf(p, dim) {
  return dim === 'requests' ? p.calls + p.failed : dim === 'tokens' ? p.inputTokens + p.outputTokens : p[dim];
}
function windowed(values, bucketMs, windowMs) {
  const k = Math.round(windowMs / bucketMs);
  if (k <= 1) return values;
  return values.map((_, i) => values.slice(Math.max(0, i - k + 1), i + 1).reduce((a, b) => a + b, 0));
}
function useChart(id, v, points, base, scope) {
  const series = [];
  let n = 0;
  for (const [dim, label] of DIMS) {
    const d = scope && scope.dimensions[dim];
    const limit = d ? (d.limit !== undefined ? d.limit : d.providerLimit) : undefined;
    if (!limit) continue;
    const perBucket = v.windowMs >= v.bucketMs ? limit : limit * (v.bucketMs / v.windowMs);
    const use = windowed(points.map((p) => useOf(p, dim)), v.bucketMs, v.windowMs);
    series.push({ key: dim, label: label + ' of ' + compact(limit) + (d.limit !== undefined ? '' : ' (the provider\\'s)'),
      kind: 'line', cls: 's' + n++, values: use.map((u) => u / perBucket) });
  }
  $(id + '-figure').hidden = series.length === 0;
  if ($(id + '-none')) $(id + '-none').hidden = series.length > 0;
  if (series.length === 0) return;
  const w = v.windowMs / 1000;
  const k = Math.round(v.bucketMs / v.windowMs);
  $(id + '-note').textContent = v.windowMs > v.bucketMs ? 'share of each limit used in every rolling ' + w + ' s window, by the calls that ended in it'
    : k <= 1 ? 'share of each limit used in each ' + w + ' s window, by the calls that ended in it'
    : 'share of each limit used per bucket, against ' + k + ' windows of ' + w + ' s';
  chart(id, { ...base, format: pct, limit: { value: 1, label: 'the limit' }, series: series });
}
function usageCharts(v, p, base) {
  chart('chart-calls', { ...base, stack: true, format: compact, series: [
    { key: 'calls', label: 'succeeded', cls: 's0', values: p.map((x) => x.calls) },
    { key: 'failed', label: 'failed tries (429s included)', cls: 's1', values: p.map((x) => x.failed) }] });
  chart('chart-tokens', { ...base, stack: true, format: compact, series: [
    { key: 'inputTokens', label: 'input (uncached and cache writes)', cls: 's0', values: p.map((x) => x.inputTokens) },
    { key: 'outputTokens', label: 'output', cls: 's2', values: p.map((x) => x.outputTokens) }] });
  chart('chart-wait', { ...base, format: ms, series: [
    { key: 'p50', label: 'p50', kind: 'line', cls: 's0', values: p.map((x) => x.wait.p50) },
    { key: 'p95', label: 'p95', kind: 'line', cls: 's1', values: p.map((x) => x.wait.p95) }] });
  chart('chart-latency', { ...base, format: ms, series: [
    { key: 'p50', label: 'p50', kind: 'line', cls: 's0', values: p.map((x) => x.latency.p50) },
    { key: 'p95', label: 'p95', kind: 'line', cls: 's1', values: p.map((x) => x.latency.p95) }] });
  chart('chart-spend', { ...base, format: usd, series: [
    { key: 'spendUsd', label: 'spend (list price, or the budgets\\' prices)', cls: 's3', values: p.map((x) => x.spendUsd) }] });
}
function budgetRows(spend, only, withModels) {
  const lines = spend.lines.filter((l) => (only ? l.name === only : withModels || !l.name.startsWith('model:')));
  const why = !spend.configured
    ? 'No budgets configured: nothing holds or caps spend (set budgets in the config); spend is counted at list price.'
    : only ? 'No budget for ' + only + ' (budgets name global or tenant:<name>).' : 'No spend yet this day or month.';
  $('budget-rows').replaceChildren(...(lines.length === 0 ? [emptyRow(6, why, 'budget-rows-empty')] : lines.map((l) => {
    const tr = cellRow([l.name, l.period, { text: usd(l.spentUsd), cls: 'n', testid: 'spent-' + l.name + '-' + l.period, value: l.spentUsd },
      { text: l.limitUsd === undefined ? 'no budget' : usd(l.limitUsd), cls: 'n' }, '', new Date(l.resetsAt).toISOString().replace('.000Z', 'Z')]);
    if (l.limitUsd !== undefined) {
      const bar = document.createElement('div');
      bar.className = 'bar';
      const fill = document.createElement('span');
      fill.style.width = Math.min(100, (100 * l.spentUsd) / l.limitUsd).toFixed(1) + '%';
      bar.append(fill);
      bar.title = pct(l.spentUsd / l.limitUsd) + ' of the budget';
      tr.children[4].append(bar);
    }
    return tr;
  })));
}
`;
