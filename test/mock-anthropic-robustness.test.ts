/**
 * The mock as a process under abuse: a request for 10^12 output tokens, a huge answer, and a
 * SIGTERM in the middle of a long stream. It stays small and stops when told.
 */
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import Anthropic, { BadRequestError } from '@anthropic-ai/sdk';
import { afterEach, describe, expect, it } from 'vitest';
import { spawnMockCommand } from './fixtures/mock-command.ts';

const children: ChildProcess[] = [];

afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
});

/** Starts `llmq mock-anthropic …args` in a child process; resolves with it and its URL. */
async function startCommand(args: string[]) {
  const child = spawnMockCommand(args);
  children.push(child);
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const url = (await lines.next()).value as string;
  return { child, url };
}

/** The resident memory of a process, in MB (Linux). */
function residentMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1]) / 1024;
}

const ask = (maxTokens: number) => ({
  model: 'claude-mock-1',
  max_tokens: maxTokens,
  messages: [{ role: 'user' as const, content: 'Write forever.' }],
});

describe('the mock under abuse', () => {
  it('answers max_tokens 1e12 with the API 400, plain or streamed, and stays small', async () => {
    const { child, url } = await startCommand(['--output-share', '1']);
    const client = new Anthropic({ apiKey: 'k', baseURL: url, maxRetries: 0, timeout: 60_000 });
    for (const stream of [false, true]) {
      const error = await client.messages.create({ ...ask(1e12), stream }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(BadRequestError);
      expect((error as BadRequestError).message).toContain(
        'max_tokens: 1000000000000 > 64000, which is the maximum allowed number of output tokens for claude-mock-1',
      );
    }
    // The most it allows, in full: made as it goes, not held whole.
    const message = await client.messages.stream(ask(64_000)).finalMessage();
    expect(message.usage.output_tokens).toBe(64_000);
    expect(residentMb(child.pid!)).toBeLessThan(400);
  });

  it('bounds what it is told to allow: --max-output-tokens 1e6 is the most', async () => {
    const { child, url } = await startCommand([
      '--output-share',
      '1',
      '--max-output-tokens',
      '1000000',
    ]);
    const client = new Anthropic({ apiKey: 'k', baseURL: url, maxRetries: 0, timeout: 120_000 });
    const message = await client.messages.create(ask(1_000_000));
    expect(message.usage.output_tokens).toBe(1_000_000);
    expect(residentMb(child.pid!)).toBeLessThan(500);
  });

  it('stops on SIGTERM in the middle of a long stream, exiting 0', async () => {
    // A million tokens at a millisecond each: a stream of about 17 minutes.
    const { child, url } = await startCommand([
      '--output-share',
      '1',
      '--max-output-tokens',
      '1000000',
      '--latency-per-token',
      '1',
    ]);
    const client = new Anthropic({ apiKey: 'k', baseURL: url, maxRetries: 0 });
    const stream = client.messages.stream(ask(1_000_000));
    const begun = new Promise<void>((resolve) => stream.once('streamEvent', () => resolve()));
    const ended = stream.finalMessage().then(
      () => 'completed',
      () => 'cut',
    );
    await begun;
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    const [code] = await exited;
    expect(code).toBe(0);
    expect(await ended).toBe('cut');
  });
});
