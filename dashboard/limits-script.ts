/**
 * The table of use against limits, shared by the limiter page and the tenant and model pages:
 * per scope and dimension, what llmq's own window holds (open calls at their reservation, settled
 * ones at their usage: never above the limit, by construction), the configured limit, what a call
 * may take now (`free`: the admission's own rule, read by view-4.lua), and the provider's view: its limit and its room now, projected from its latest reading. The bar shows
 * our use against the limit that binds, and apart from it the spend the provider counts that is
 * not ours (its limit less its room less our use).
 */

import { DIMENSIONS } from '../shared/dimensions.ts';

export const LIMITS_HEAD =
  '<thead><tr><th>scope</th><th>dimension</th><th class="n">used</th><th class="n">limit</th>' +
  '<th class="n">provider limit</th><th class="n">provider room</th><th class="bar-cell">use</th></tr></thead>';

export const LIMITS_SCRIPT = `
const LIMIT_DIMS = ${JSON.stringify(DIMENSIONS.map((d) => [d.name, d.label]))};
const SHAPE_TEXT = { bucket: 'refills continuously', window: 'a sliding window', unknown: 'shape not learned yet' };
function limitRow(scope, dim, label) {
  const id = 'use-' + scope.scope + '-' + dim;
  const tr = cellRow([{ text: scope.scope }, { text: label }, '', '', '', '', '', '']);
  tr.id = id;
  tr.dataset.testid = id;
  ['used', 'limit', 'free', 'provider-limit', 'provider-room'].forEach((k, i) => {
    const td = tr.children[2 + i];
    td.className = 'n';
    td.id = id + '-' + k;
    td.dataset.testid = td.id;
  });
  const bar = document.createElement('div');
  bar.className = 'bar';
  bar.id = id + '-bar';
  bar.append(document.createElement('span'), document.createElement('span'));
  bar.lastChild.className = 'others';
  tr.children[7].className = 'bar-cell';
  tr.children[7].append(bar);
  tr.children[0].title = SHAPE_TEXT[scope.shape] + (scope.roundingStep ? ', readings rounded to ' + num.format(scope.roundingStep) : '');
  return tr;
}
function fillLimitRow(scope, dim) {
  const id = 'use-' + scope.scope + '-' + dim;
  const u = scope.dimensions[dim];
  set(id + '-used', u.used);
  set(id + '-limit', u.limit === undefined ? null : u.limit, u.limit === undefined ? 'none' : undefined);
  set(id + '-free', u.room === undefined ? null : Math.max(0, u.room), u.room === undefined ? 'no limit' : undefined);
  set(id + '-provider-limit', u.providerLimit === undefined ? null : u.providerLimit, u.providerLimit === undefined ? 'no reading' : undefined);
  set(id + '-provider-room', u.providerRoom === undefined ? null : u.providerRoom, u.providerRoom === undefined ? '\\u2013' : undefined);
  const binds = Math.min(u.limit === undefined ? Infinity : u.limit, u.providerLimit === undefined ? Infinity : u.providerLimit);
  const bar = $(id + '-bar');
  const mine = Number.isFinite(binds) ? Math.min(1, u.used / binds) : 0;
  const others = u.providerLimit !== undefined && u.providerRoom !== undefined
    ? Math.max(0, u.providerLimit - u.providerRoom - u.used) : 0;
  const theirs = Number.isFinite(binds) ? Math.min(1 - mine, others / binds) : 0;
  bar.firstChild.style.width = (mine * 100).toFixed(1) + '%';
  bar.lastChild.style.width = (theirs * 100).toFixed(1) + '%';
  bar.dataset.others = String(others);
  bar.classList.toggle('hot', mine > 0.9);
  bar.title = Number.isFinite(binds) ? pct(mine) + ' used by llmq' + (others > 0 ? ', ' + num.format(others) + ' by others (the provider\\'s reading)' : '') : 'no limit';
}
function limitRows(tbodyId, scopes, why) {
  const body = $(tbodyId);
  const want = [];
  for (const s of scopes) for (const [dim, label] of LIMIT_DIMS) {
    const u = s.dimensions[dim];
    if (u.limit !== undefined || u.providerLimit !== undefined || u.used > 0) want.push([s, dim, label]);
  }
  if (want.length === 0) { body.replaceChildren(emptyRow(8, why, tbodyId + '-empty')); body.dataset.rows = ''; return; }
  const ids = want.map(([s, d]) => s.scope + '|' + d).join('\\n');
  if (body.dataset.rows !== ids) {
    body.replaceChildren(...want.map(([s, d, l]) => limitRow(s, d, l)));
    body.dataset.rows = ids;
  }
  for (const [s, dim] of want) fillLimitRow(s, dim);
}
`;
