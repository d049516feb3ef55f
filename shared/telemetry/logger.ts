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
      formatters: { level: (label) => ({ level: label }) },
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
} {
  return {
    info: (m, f) => log.info(f ?? {}, m),
    warn: (m, f) => log.warn(f ?? {}, m),
  };
}
