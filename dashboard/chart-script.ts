/**
 * The charts of llmq's pages, drawn in the browser as inline SVG (no library, no build step).
 * `chart(id, spec)` draws bars (stacked, or one beside another) and lines over the buckets of a
 * range, with an optional limit line; every bar carries a tooltip (`<title>`), and the SVG keeps
 * the values it drew in `data-series` (JSON, by series key) for a test to read back.
 */

export const CHART_SCRIPT = `
const SVGNS = 'http://www.w3.org/2000/svg';
function svgEl(name, attrs, text) {
  const e = document.createElementNS(SVGNS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}
function tick(t, bucketMs) {
  const d = new Date(t);
  const hm = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hour12: false });
  return bucketMs < 60000 ? hm + ':' + String(d.getSeconds()).padStart(2, '0') : hm;
}
function niceTop(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
function chartTop(spec, n) {
  const bars = spec.series.filter((s) => s.kind !== 'line');
  let top = 0;
  for (let i = 0; i < n; i++) {
    const vs = bars.map((s) => s.values[i] || 0);
    top = Math.max(top, spec.stack ? vs.reduce((a, b) => a + b, 0) : Math.max(0, ...vs));
    for (const s of spec.series) if (s.kind === 'line' && s.values[i] !== null) top = Math.max(top, s.values[i] || 0);
  }
  if (spec.limit && spec.limit.value) top = Math.max(top, spec.limit.value * 1.08);
  // Counts get whole steps on the axis.
  return niceTop(Math.max(top * 1.04, spec.format === compact ? 4 : 0));
}
function drawBars(parts, spec, g) {
  const bars = spec.series.filter((s) => s.kind !== 'line');
  const n = bars.length ? bars[0].values.length : 0;
  for (let i = 0; i < n; i++) {
    let base = 0;
    bars.forEach((s, j) => {
      const v = s.values[i] || 0;
      if (v <= 0) return;
      const w = spec.stack ? g.slot * 0.8 : (g.slot * 0.8) / bars.length;
      const x = g.x(i) + g.slot * 0.1 + (spec.stack ? 0 : j * w);
      const y0 = spec.stack ? base : 0;
      const r = svgEl('rect', { class: s.cls, x: x, y: g.y(y0 + v), width: Math.max(1, w), height: Math.max(0.5, g.y(y0) - g.y(y0 + v)) });
      r.append(svgEl('title', {}, tick(spec.from + i * spec.bucketMs, spec.bucketMs) + ' \\u00b7 ' + s.label + ': ' + spec.format(v)));
      parts.push(r);
      if (spec.stack) base += v;
    });
  }
}
function drawLines(parts, spec, g) {
  for (const s of spec.series.filter((x) => x.kind === 'line')) {
    let run = [];
    const flush = () => { if (run.length > 1) parts.push(svgEl('polyline', { class: s.cls, points: run.join(' ') })); run = []; };
    s.values.forEach((v, i) => {
      if (v === null || v === undefined) { flush(); return; }
      const cx = g.x(i) + g.slot / 2;
      run.push(cx.toFixed(1) + ',' + g.y(v).toFixed(1));
      if (v === 0) return;
      const dot = svgEl('circle', { class: s.cls, cx: cx, cy: g.y(v), r: 1.8 });
      dot.append(svgEl('title', {}, tick(spec.from + i * spec.bucketMs, spec.bucketMs) + ' \\u00b7 ' + s.label + ': ' + spec.format(v)));
      parts.push(dot);
    });
    flush();
  }
}
function chart(id, spec) {
  const svg = $(id);
  const W = 560, H = 170, L = 54, R = 8, T = 8, B = 20;
  const n = spec.series[0].values.length;
  const top = chartTop(spec, n);
  const slot = (W - L - R) / n;
  const g = { slot: slot, x: (i) => L + i * slot, y: (v) => T + (H - T - B) * (1 - v / top) };
  const parts = [];
  for (const f of [0, 0.5, 1]) {
    parts.push(svgEl('line', { class: 'grid', x1: L, x2: W - R, y1: g.y(top * f), y2: g.y(top * f) }));
    parts.push(svgEl('text', { x: L - 5, y: g.y(top * f) + 4, 'text-anchor': 'end' }, spec.format(top * f)));
  }
  drawBars(parts, spec, g);
  drawLines(parts, spec, g);
  if (spec.limit && spec.limit.value) {
    parts.push(svgEl('line', { class: 'limit', x1: L, x2: W - R, y1: g.y(spec.limit.value), y2: g.y(spec.limit.value), 'data-testid': id + '-limit', 'data-value': spec.limit.value }));
  }
  for (const k of [0, 1, 2, 3]) {
    const i = Math.round((k * (n - 1)) / 3);
    parts.push(svgEl('text', { x: g.x(i) + slot / 2, y: H - 5, 'text-anchor': k === 0 ? 'start' : k === 3 ? 'end' : 'middle' }, k === 3 ? 'now' : tick(spec.from + i * spec.bucketMs, spec.bucketMs)));
  }
  svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  svg.dataset.series = JSON.stringify(Object.fromEntries(spec.series.map((s) => [s.key, s.values])));
  svg.dataset.bucketMs = String(spec.bucketMs);
  svg.dataset.from = String(spec.from);
  svg.replaceChildren(...parts);
  const legend = $(id + '-legend');
  const keys = spec.series.map((s) => [s.cls, s.label]);
  if (spec.limit && spec.limit.value) keys.push(['limit', spec.limit.label]);
  if (legend) legend.replaceChildren(...keys.map(([cls, label]) => legendKey(cls, label)));
}
function legendKey(cls, label) {
  const span = document.createElement('span');
  const i = document.createElement('i');
  i.className = 'key ' + cls;
  span.append(i, label);
  return span;
}
`;

/** A chart's place on a page: its caption, its SVG and its legend. */
export function figure(id: string, caption: string, note = ''): string {
  const small = note ? ` <small>${note}</small>` : '';
  return `<figure><figcaption>${caption}${small}</figcaption><svg id="${id}" data-testid="${id}" role="img" aria-label="${caption}" viewBox="0 0 560 170"></svg><p class="legend" id="${id}-legend"></p></figure>`;
}

/**
 * The chart of use against limits, with its note; hidden when no limit applies (the page says
 * why in `useNote(id)`, when it has one).
 */
export function useFigure(id: string): string {
  return (
    `<figure id="${id}-figure"><figcaption>Use against limits <small id="${id}-note"></small></figcaption>` +
    `<svg id="${id}" data-testid="${id}" role="img" aria-label="use against limits" viewBox="0 0 560 170"></svg>` +
    `<p class="legend" id="${id}-legend"></p></figure>`
  );
}

/** What a page says when no limit applies to draw use against. */
export function useNote(id: string, text: string): string {
  return `<p id="${id}-none" data-testid="${id}-none" class="note" hidden>${text}</p>`;
}
