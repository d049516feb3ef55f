/**
 * Bull Board's page as llmq serves it: llmq's bar of links above Bull Board's header, and
 * without the web font Bull Board links from Google (the page's CSP allows no other origin,
 * which the browser would report on every page; the system font is used instead).
 */

import type { FastifyInstance } from 'fastify';
import { NAV_CSS, navBar } from './nav.ts';

/** Where the page's added stylesheet is served (the CSP allows only this origin's). */
export const BOARD_CSS_PATH = '/llmq-static/board.css';

const FONT_LINK = /<link\b[^>]*\bhref="https:\/\/fonts\.(?:googleapis|gstatic)\.com[^>]*>\s*/g;

/** Bull Board's entry page with the bar and the stylesheet, and no font from elsewhere. */
export function rewriteBoardHtml(html: string, readOnly: boolean): string {
  return html
    .replace(FONT_LINK, '')
    .replace('</head>', `<link rel="stylesheet" href="${BOARD_CSS_PATH.slice(1)}">\n</head>`)
    .replace(/<body\b[^>]*>/, (body) => `${body}\n${navBar('board', readOnly)}`);
}

/**
 * The bar, and Bull Board moved down under it: its header (fixed at the top) by the bar's
 * height, and everything placed after the header (`--header-offset`) as much.
 */
export const BOARD_CSS = `${NAV_CSS}
#root { --header-offset: calc(var(--header-height) + 32px); }
#root header[class^="header-"] { top: 32px; height: var(--header-height); }
`;

/** Rewrites Bull Board's entry page as it is sent, and serves its added stylesheet. */
export function serveBoardPage(app: FastifyInstance, readOnly: boolean): void {
  app.addHook('onSend', async (_req, reply, payload) => {
    const html = String(reply.getHeader('content-type') ?? '').startsWith('text/html');
    // Bull Board's page is the one that carries its UI config.
    if (!html || typeof payload !== 'string' || !payload.includes('id="__UI_CONFIG__"'))
      return payload;
    return rewriteBoardHtml(payload, readOnly);
  });
  app.get(BOARD_CSS_PATH, (_req, reply) =>
    reply.type('text/css; charset=utf-8').header('cache-control', 'no-cache').send(BOARD_CSS),
  );
}
