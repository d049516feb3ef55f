/**
 * The links between the dashboard's pages, one bar on each: llmq's own pages and Bull Board's
 * (on Bull Board's page too, above its header). Static markup, no script.
 */

/** The pages the bar links, in order. */
const PAGES = [
  { id: 'overview', href: 'overview', text: 'Overview' },
  { id: 'limiter', href: 'limiter', text: 'Limiter' },
  { id: 'board', href: './', text: 'Jobs (Bull Board)' },
] as const;

export type PageId = (typeof PAGES)[number]['id'] | 'tenant' | 'model';

/** The bar, with `current` marked; `readOnly` says so on it. */
export function navBar(current: PageId, readOnly: boolean): string {
  const links = PAGES.map(
    (p) =>
      `<a href="${p.href}" data-testid="nav-${p.id}"${p.id === current ? ' aria-current="page"' : ''}>${p.text}</a>`,
  ).join('');
  const badge = readOnly
    ? '<span class="llmq-ro" data-testid="nav-read-only">read-only</span>'
    : '';
  return `<nav class="llmq-nav" aria-label="llmq"><b>llmq</b>${links}${badge}</nav>`;
}

/** The bar's look, shared by every page (Bull Board's included). */
export const NAV_CSS = `
.llmq-nav { position:fixed; top:0; left:0; right:0; height:32px; z-index:1000; display:flex; align-items:center;
  gap:1.1rem; padding:0 1rem; background:#1c2430; color:#e6e9ef; font:13px/1 system-ui, -apple-system, "Segoe UI", sans-serif; }
.llmq-nav b { font-weight:650; letter-spacing:.02em; margin-right:.3rem; }
.llmq-nav a { color:#c8d3e6; text-decoration:none; padding:.35rem .1rem; border-bottom:2px solid transparent; }
.llmq-nav a:hover { color:#fff; }
.llmq-nav a[aria-current="page"] { color:#fff; border-bottom-color:#7aa2f7; }
.llmq-nav .llmq-ro { margin-left:auto; background:#6b7280; color:#fff; border-radius:3px; padding:.2rem .45rem; font-size:11px; }
`;
