/**
 * Writes (every method but GET and HEAD) come only from the dashboard's own pages or from a
 * script with the bearer token. Two checks, because a browser sends credentials by itself:
 * - the `Origin` (or, without one, the `Referer`) must be this dashboard's own origin, port
 *   included: a page on another port of the same host is another origin (cookies and cached
 *   Basic credentials would not tell them apart);
 * - the credential must be one a browser does not attach to a cross-site request: the bearer
 *   token, or the SameSite=Strict session cookie (handed out with every page); Basic auth alone
 *   does not do for a write.
 */

/** How the request authenticated (see `AccessGuard.check`), and whether it carries the session cookie. */
export interface WriteCredentials {
  readonly via: 'basic' | 'bearer' | 'cookie' | 'query';
  readonly session: boolean;
}

const SAFE = new Set(['GET', 'HEAD', 'OPTIONS']);

function hostOf(url: string): string | undefined {
  try {
    return new URL(url).host;
  } catch {
    return undefined;
  }
}

/** Why a request may not write, or undefined when it may (or does not write). */
export function writeRefusal(
  req: {
    readonly method: string;
    readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  },
  creds: WriteCredentials,
): string | undefined {
  if (SAFE.has(req.method)) return undefined;
  const one = (name: string) => {
    const v = req.headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  const host = one('host');
  const from = one('origin') ?? one('referer');
  if (from !== undefined) {
    if (host === undefined || hostOf(from) !== host)
      return `a write from another origin (${from.slice(0, 100)}) is refused: use the dashboard's own pages`;
  } else if (creds.via !== 'bearer') {
    return 'a write without Origin or Referer needs the bearer token (Authorization: Bearer)';
  }
  if (creds.via === 'bearer' || creds.session) return undefined;
  return 'a write needs the session cookie of a page of this dashboard, or the bearer token: Basic auth alone is not enough';
}
