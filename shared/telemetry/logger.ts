import { type DestinationStream, type LevelWithSilent, type Logger, pino } from 'pino';
import { ConfigError } from '../errors.ts';

const LEVELS: readonly LevelWithSilent[] = [
  'fatal',
  'error',
  'warn',
  'info',
  'debug',
  'trace',
  'silent',
];

/** Fields never logged whole, wherever they appear: keys and credentials. */
const REDACT = [
  'apiKey',
  'authorization',
  'password',
  '*.apiKey',
  '*.authorization',
  '*.password',
  'headers["x-api-key"]',
];

/** The longest string logged whole; what clients send (a model name, a message) can be any size. */
export const MAX_LOGGED_CHARS = 256;

/** `s` as logged: its first {@link MAX_LOGGED_CHARS} characters and how long it was. */
export function capLogged(s: string): string {
  return s.length <= MAX_LOGGED_CHARS ? s : `${s.slice(0, MAX_LOGGED_CHARS)}… (${s.length} chars)`;
}

/** A log line's fields with every long string capped (arrays and objects a few levels deep). */
export function capLogFields(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return capLogged(value);
  if (value === null || typeof value !== 'object' || depth >= 4) return value;
  if (Array.isArray(value)) return value.slice(0, 50).map((v) => capLogFields(v, depth + 1));
  if (value instanceof Error) return { message: capLogged(value.message), ...codeOf(value) };
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value).slice(0, 50)) out[k] = capLogFields(v, depth + 1);
  return out;
}

const codeOf = (e: Error) => {
  const code = (e as { code?: unknown }).code;
  return code === undefined ? {} : { code };
};

export interface LoggerOptions {
  /** The process's part (`worker`, `serve`, `dashboard`), in every line. */
  readonly component: string;
  /** @default env LLMQ_LOG_LEVEL, else 'info' */
  readonly level?: string | undefined;
  /** Where lines go. @default stderr: JSON, or readable lines when stderr is a terminal */
  readonly destination?: DestinationStream;
  readonly env?: Readonly<Record<string, string | undefined>>;
}

/** The level from an option or LLMQ_LOG_LEVEL; a clear error for a bad one. */
export function logLevel(
  level: string | undefined,
  env: Readonly<Record<string, string | undefined>> = process.env,
): LevelWithSilent {
  const raw = (level ?? env['LLMQ_LOG_LEVEL'] ?? 'info').trim().toLowerCase();
  if (!(LEVELS as readonly string[]).includes(raw)) {
    throw new ConfigError(
      `LLMQ_LOG_LEVEL must be one of ${LEVELS.join(', ')}, got ${JSON.stringify(raw)}`,
    );
  }
  return raw as LevelWithSilent;
}

/**
 * A pino logger for a long-running command: one JSON object per line on stderr (time, level,
 * component, msg and the event's fields), readable lines instead when stderr is a terminal.
 */
export function createLogger(options: LoggerOptions): Logger {
  const destination =
    options.destination ??
    (process.stderr.isTTY ? readableStderr() : pino.destination({ fd: 2, sync: true }));
  return pino(
    {
      level: logLevel(options.level, options.env),
      base: { component: options.component },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: {
        level: (label) => ({ level: label }),
        log: (fields) => capLogFields(fields) as Record<string, unknown>,
      },
      // The message too: it may quote what a client sent.
      hooks: {
        logMethod(args, method) {
          method.apply(
            this,
            args.map((a) => (typeof a === 'string' ? capLogged(a) : a)) as typeof args,
          );
        },
      },
      redact: { paths: REDACT, censor: '[redacted]' },
    },
    destination,
  );
}

/** `12:00:01.123 INFO  job completed job=42 model=… waitMs=12`: for a person at a terminal. */
export function readableLine(json: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const { time, level, msg, component, ...rest } = o;
  const t = typeof time === 'string' ? time.slice(11, 23) : '';
  const fields = Object.entries(rest)
    .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join(' ');
  const lvl = String(level ?? '')
    .toUpperCase()
    .padEnd(5);
  return `${t} ${lvl} ${component ? `[${component}] ` : ''}${msg ?? ''}${fields ? ` ${fields}` : ''}\n`;
}

function readableStderr(): DestinationStream {
  return { write: (line: string) => process.stderr.write(readableLine(line.trimEnd())) };
}

/** The worker's logger interface over pino. */
export function workerLogger(log: Logger): {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
} {
  return {
    info: (m, f) => log.info(f ?? {}, m),
    warn: (m, f) => log.warn(f ?? {}, m),
    error: (m, f) => log.error(f ?? {}, m),
  };
}
