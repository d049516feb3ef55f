/**
 * Turns a failed parse of the mock's options into one ConfigError that names the option (or the
 * flag the user typed), what is allowed and the bad value.
 */

import type { z } from 'zod';
import { ConfigError } from '../../shared/errors.ts';
import { FAULT_GROUPS } from './faults.ts';
import { faultRatesSchema, mockAnthropicOptionsSchema } from './options-schema.ts';

/**
 * How to name an option in an error: the command passes its flag names and the raw strings typed,
 * so the message reads `--algo must be sliding or bucket, got "fixed"`. Keys are dotted option
 * paths such as `limits.requests` or `algorithm`.
 */
export type OptionLabels = Readonly<Record<string, OptionLabel>>;

export interface OptionLabel {
  /** How the user named it, e.g. `--rpm`. */
  readonly name: string;
  /** The text the user typed, shown instead of the converted value. */
  readonly raw?: string;
  /** What is allowed, when the user's units differ from the option's (seconds vs ms). */
  readonly allowed?: string;
}

/** The error for the first of `issues`, with `input` the options as given. */
export function toConfigError(
  issues: readonly z.core.$ZodIssue[],
  input: unknown,
  labels: OptionLabels,
): ConfigError {
  const issue = issues[0];
  if (!issue) return new ConfigError('mock-anthropic options are invalid');
  if (issue.code === 'unrecognized_keys') {
    const where = issue.path.length > 0 ? `${issue.path.join('.')}.` : '';
    const known = Object.keys(knownKeys(issue.path)).join(', ');
    return new ConfigError(
      `unknown mock-anthropic option ${issue.keys.map((key) => `"${where}${key}"`).join(', ')}: ` +
        `allowed are ${known}`,
    );
  }
  // Name the option, not an element inside it (`outputShare`, not `outputShare.1`).
  const firstIndex = issue.path.findIndex((key) => typeof key === 'number');
  const optionPath = firstIndex >= 0 ? issue.path.slice(0, firstIndex) : issue.path;
  const path = optionPath.map(String).join('.');
  if (path === 'faults' && issue.code === 'custom') {
    const group = FAULT_GROUPS[(issue.params as { group?: number } | undefined)?.group ?? 0]!;
    const name = group
      .map((kind) => labels[`faults.${kind}`]?.name ?? `faults.${kind}`)
      .join(' + ');
    const faults = (valueAt(input, ['faults']) ?? {}) as Record<string, unknown>;
    const sum = group.reduce((total, key) => {
      const rate = faults[key];
      return total + (typeof rate === 'number' ? rate : 0);
    }, 0);
    return new ConfigError(`${name} must be at most 1, got ${Number(sum.toFixed(6))}`);
  }
  const label = labels[path];
  const name = label?.name ?? (path === '' ? 'mock-anthropic options' : path);
  const shown =
    label?.raw !== undefined ? JSON.stringify(label.raw) : show(valueAt(input, optionPath));
  return new ConfigError(`${name} must be ${label?.allowed ?? issue.message}, got ${shown}`);
}

function knownKeys(path: readonly PropertyKey[]): Record<string, unknown> {
  if (path[0] === 'limits') return { requests: 0, inputTokens: 0, outputTokens: 0, tokens: 0 };
  if (path[0] === 'faults') return faultRatesSchema.shape;
  return mockAnthropicOptionsSchema.shape;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const key of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value);
  return JSON.stringify(value) ?? String(value);
}
