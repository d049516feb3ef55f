import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { invokedAs } from '../scripts/cli/common.ts';
import { llmqFromSource, REDIS_URL } from './helpers.ts';

const ROOT = new URL('..', import.meta.url).pathname;

function runCli(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, llmqFromSource(args), {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('llmq demo', () => {
  it('summarizes every bundled document through the mock and exits 0 with its report', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, REDIS_URL };
    delete env['ANTHROPIC_API_KEY'];
    delete env['ANTHROPIC_BASE_URL'];
    const { code, stdout, stderr } = await runCli(['demo'], env);
    expect(stderr).toBe('');
    expect(code).toBe(0);
    const report = /demo: (\d+)\/(\d+) summarized, 0 dead-lettered, 0 provider 429s/.exec(stdout);
    expect(report, stdout).not.toBeNull();
    expect(Number(report![1])).toBe(Number(report![2]));
    expect(Number(report![2])).toBeGreaterThanOrEqual(5);
    // One summary line per document, each with text.
    expect(stdout.match(/^ {2}\S+\.(md|txt): \w+/gm)?.length).toBe(Number(report![2]));
    // It ends with the first lines of the summaries, after the tally, then what to try next.
    const lines = stdout.trimEnd().split('\n');
    const tally = lines.findIndex((l) => l.startsWith('demo: '));
    const documents = Number(report![2]);
    expect(lines[tally + 1]).toMatch(/^first lines of the summaries \(the mock writes placeholder/);
    for (const l of lines.slice(tally + 2, tally + 2 + documents))
      expect(l).toMatch(/^ {2}\S+\.(md|txt): \w+/);
    expect(lines.slice(tally + 2 + documents)).toEqual([
      'try next:',
      expect.stringMatching(/^ {2}llmq status +jobs per state/),
      expect.stringMatching(/^ {2}llmq dashboard +the overview/),
      expect.stringMatching(/^ {2}llmq serve +the HTTP job API/),
    ]);
  });

  it('suggests the commands as the person runs llmq: in a clone, from a project, installed', () => {
    expect(invokedAs('/src/llmq/scripts/llmq.mjs', '/src/llmq')).toBe('node scripts/llmq.mjs');
    expect(invokedAs('/home/me/app/node_modules/.bin/llmq', '/home/me/app')).toBe('npx llmq');
    expect(invokedAs('/usr/local/bin/llmq', '/home/me')).toBe('llmq');
    // A clone's bin run from elsewhere, or the sources: the plain name.
    expect(invokedAs('/src/llmq/scripts/llmq.mjs', '/tmp')).toBe('llmq');
    expect(invokedAs('/src/llmq/scripts/cli/main.ts', '/src/llmq')).toBe('llmq');
  });

  it('starts a private redis-server when nothing answers at REDIS_URL', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, REDIS_URL: 'redis://127.0.0.1:1' };
    delete env['ANTHROPIC_API_KEY'];
    const { code, stdout } = await runCli(['demo'], env);
    expect(code).toBe(0);
    expect(stdout).toContain('started a private redis-server');
    expect(stdout).toMatch(/demo: (\d+)\/\1 summarized/);
  });
});
