/**
 * llmq's own pages: the overview, the limiter, a tenant's and a model's. Each is one document
 * whose inline script and style run under a fresh nonce, and nothing else.
 */

import { randomBytes } from 'node:crypto';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { limiterPage } from './limiter-page.ts';
import { overviewPage } from './overview-page.ts';
import { usagePage } from './usage-page.ts';

function send(reply: FastifyReply, page: (nonce: string) => string) {
  const nonce = randomBytes(16).toString('base64');
  return reply
    .type('text/html; charset=utf-8')
    .header('cache-control', 'no-store')
    .header(
      'content-security-policy',
      `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; connect-src 'self'; ` +
        `img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
    )
    .send(page(nonce));
}

/** Registers `/overview`, `/limiter`, `/tenant?name=` and `/model?name=`. */
export function registerPages(app: FastifyInstance, readOnly: boolean): void {
  app.get('/overview', (_req, reply) => send(reply, (n) => overviewPage(n, readOnly)));
  app.get('/limiter', (_req, reply) => send(reply, (n) => limiterPage(n, readOnly)));
  app.get('/tenant', (_req, reply) => send(reply, (n) => usagePage(n, 'tenant', readOnly)));
  app.get('/model', (_req, reply) => send(reply, (n) => usagePage(n, 'model', readOnly)));
}
