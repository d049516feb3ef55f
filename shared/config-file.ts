import { readFileSync } from 'node:fs';
import { ConfigError } from './errors.ts';

/** A config file's content: given as an object, or read from a JSON file at a path. */
export function loadConfigFile(
  file: Record<string, unknown> | string | undefined,
): Record<string, unknown> {
  if (file === undefined) return {};
  if (typeof file !== 'string') return file;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(
      `config file ${file} cannot be read (${(err as Error).message}): check the path`,
    );
  }
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
      throw new Error('not an object');
    return parsed as Record<string, unknown>;
  } catch (err) {
    throw new ConfigError(`config file ${file} is not a JSON object (${(err as Error).message})`);
  }
}
