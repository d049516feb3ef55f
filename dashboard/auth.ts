/**
 * Who may see the dashboard. Basic auth, a bearer token, or both; with neither configured the
 * dashboard is still closed: it makes a one-time random token (like Jupyter) and prints the URL
 * carrying it. Visiting with `?token=` trades the token for an HttpOnly session cookie, so Bull
 * Board's own XHRs and the limiter page's polling carry credentials without ever seeing them.
 */

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { ConfigError } from '../shared/errors.ts';

/** Credentials the dashboard accepts. Nothing set means a one-time random token. */
export interface DashboardAuth {
  /** Basic auth user name; needs `password` too. (env LLMQ_DASHBOARD_USER) */
  readonly user?: string | undefined;
  /** Basic auth password. (env LLMQ_DASHBOARD_PASSWORD) */
  readonly password?: string | undefined;
  /**
   * Accepted as `Authorization: Bearer …` (Prometheus) and as `?token=` (a browser, once).
   * (env LLMQ_DASHBOARD_TOKEN)
   */
  readonly token?: string | undefined;
}

/** How a request proved who it is, or why it did not. */
export type AccessResult =
  | { readonly ok: true; readonly via: 'basic' | 'bearer' | 'cookie' }
  /** A valid `?token=`: the caller should hand out the session cookie. */
  | { readonly ok: true; readonly via: 'query' }
  | { readonly ok: false };

const secret = z.string().min(1).max(1_000);

/**
 * Reads the dashboard's credentials from the environment.
 *
 * @throws ConfigError when only one of user and password is set, naming the missing one.
 */
export function dashboardAuthFromEnv(env: Record<string, string | undefined>): DashboardAuth {
  const read = (name: string) => {
    const raw = env[name];
    if (raw === undefined || raw === '') return undefined;
    if (!secret.safeParse(raw).success) {
      throw new ConfigError(`${name} must be 1 to 1000 characters, got ${raw.length} characters`);
    }
    return raw;
  };
  const user = read('LLMQ_DASHBOARD_USER');
  const password = read('LLMQ_DASHBOARD_PASSWORD');
  const token = read('LLMQ_DASHBOARD_TOKEN');
  if ((user === undefined) !== (password === undefined)) {
    const missing = user === undefined ? 'LLMQ_DASHBOARD_USER' : 'LLMQ_DASHBOARD_PASSWORD';
    throw new ConfigError(
      `${missing} is not set but ${missing === 'LLMQ_DASHBOARD_USER' ? 'LLMQ_DASHBOARD_PASSWORD' : 'LLMQ_DASHBOARD_USER'} is: ` +
        'set both for Basic auth, or neither',
    );
  }
  return { user, password, token };
}

const digest = (value: string) => createHash('sha256').update(value, 'utf8').digest();

/** Compares two secrets in time that does not depend on where they differ. */
function same(a: string, b: string): boolean {
  return timingSafeEqual(digest(a), digest(b));
}

function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (!header) return out;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0) continue;
    out.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  return out;
}

/**
 * Checks requests against the configured credentials. Holds the token (given or generated) and
 * this process's session id, which is what the cookie carries: never the token itself.
 */
export class AccessGuard {
  /** The bearer token in effect, when token access is on. */
  readonly token: string | undefined;
  /** True when no credential was configured and {@link token} was made up at start. */
  readonly generated: boolean;
  private readonly basic: { readonly user: string; readonly password: string } | undefined;
  private readonly session = randomBytes(32).toString('base64url');

  constructor(auth: DashboardAuth = {}) {
    const { user, password, token } = auth;
    if ((user === undefined) !== (password === undefined)) {
      throw new TypeError('auth.user and auth.password go together: set both, or neither');
    }
    for (const [name, value] of Object.entries({ user, password, token })) {
      if (value !== undefined && value === '')
        throw new TypeError(`auth.${name} must not be empty`);
    }
    this.basic = user !== undefined && password !== undefined ? { user, password } : undefined;
    this.generated = token === undefined && this.basic === undefined;
    this.token = token ?? (this.generated ? randomBytes(24).toString('base64url') : undefined);
  }

  /** The `WWW-Authenticate` challenge of a 401: Basic makes browsers prompt. */
  get challenge(): string {
    return this.basic
      ? 'Basic realm="llmq dashboard", charset="UTF-8"'
      : 'Bearer realm="llmq dashboard"';
  }

  /** True when a browser can log in with `?token=`. */
  get acceptsQueryToken(): boolean {
    return this.token !== undefined;
  }

  /** The name of the session cookie; the port is part of it because cookies ignore ports. */
  cookieName(port: number | undefined): string {
    return `llmq_dashboard_${port ?? 0}`;
  }

  /** The `Set-Cookie` value that logs a browser in for this process's life. */
  sessionCookie(port: number | undefined): string {
    return `${this.cookieName(port)}=${this.session}; Path=/; HttpOnly; SameSite=Strict`;
  }

  /** Whether the request carries this process's session cookie. */
  hasSession(headers: { readonly cookie?: string | undefined }, port: number | undefined): boolean {
    const cookie = parseCookies(headers.cookie).get(this.cookieName(port));
    return cookie !== undefined && same(cookie, this.session);
  }

  /** Decides one request from its headers and its `?token=` (if any). */
  check(
    headers: { readonly authorization?: string | undefined; readonly cookie?: string | undefined },
    queryToken: string | null,
    port: number | undefined,
  ): AccessResult {
    const auth = headers.authorization ?? '';
    const space = auth.indexOf(' ');
    const scheme = space > 0 ? auth.slice(0, space).toLowerCase() : '';
    const value = space > 0 ? auth.slice(space + 1).trim() : '';
    if (scheme === 'bearer' && this.token !== undefined && same(value, this.token)) {
      return { ok: true, via: 'bearer' };
    }
    if (scheme === 'basic' && this.basic) {
      const decoded = Buffer.from(value, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon >= 0) {
        // Both compared every time, so a wrong user takes as long as a wrong password.
        const userOk = same(decoded.slice(0, colon), this.basic.user);
        const passwordOk = same(decoded.slice(colon + 1), this.basic.password);
        if (userOk && passwordOk) return { ok: true, via: 'basic' };
      }
    }
    if (this.hasSession(headers, port)) return { ok: true, via: 'cookie' };
    if (queryToken !== null && this.token !== undefined && same(queryToken, this.token)) {
      return { ok: true, via: 'query' };
    }
    return { ok: false };
  }
}
