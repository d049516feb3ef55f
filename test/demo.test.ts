import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
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
