import { describe, expect, it } from 'vitest';
import { AuthThrottle } from '../shared/auth-throttle.ts';

function clocked(options: ConstructorParameters<typeof AuthThrottle>[0] = {}) {
  let now = 1_000_000;
  const lines: string[] = [];
  const t = new AuthThrottle({ now: () => now, log: (l) => lines.push(l), ...options });
  return { t, lines, advance: (ms: number) => (now += ms) };
}

describe('the per-address auth throttle', () => {
  it('refuses an address after its free failures, for a time that doubles, up to the cap', () => {
    const { t, lines, advance } = clocked({
      freeFailures: 2,
      baseDelayMs: 1_000,
      maxDelayMs: 4_000,
    });
    t.failed('10.0.0.1');
    t.failed('10.0.0.1');
    expect(t.check('10.0.0.1')).toEqual({ ok: true });
    const waits: number[] = [];
    for (let i = 0; i < 4; i++) {
      t.failed('10.0.0.1');
      const v = t.check('10.0.0.1');
      waits.push(v.ok ? 0 : v.retryAfterMs);
      advance(v.ok ? 0 : v.retryAfterMs);
      expect(t.check('10.0.0.1')).toEqual({ ok: true });
    }
    expect(waits).toEqual([1_000, 2_000, 4_000, 4_000]);
    expect(t.check('10.0.0.2')).toEqual({ ok: true });
    expect(lines).toHaveLength(4);
    expect(lines[0]).toBe('3 failed authentications from 10.0.0.1: refusing it for 1 s');
  });

  it('forgets an address only once it stayed quiet for the window', () => {
    const { t, advance } = clocked({ freeFailures: 1, windowMs: 10_000 });
    t.failed('a');
    advance(9_000);
    t.failed('a');
    expect(t.check('a').ok).toBe(false);
    advance(10_001);
    expect(t.check('a').ok).toBe(true);
    advance(10_001);
    t.failed('a');
    expect(t.check('a').ok).toBe(true);
    advance(10_001);
    t.failed('a');
    expect(t.check('a').ok).toBe(true);
    t.failed('a');
    expect(t.check('a').ok).toBe(false);
  });

  it('remembers at most maxAddresses, dropping the least recently seen', () => {
    const { t } = clocked({ freeFailures: 0, maxAddresses: 3 });
    for (const a of ['a', 'b', 'c', 'd']) t.failed(a);
    expect(t.size).toBe(3);
    expect(t.check('a').ok).toBe(true);
    expect(t.check('d').ok).toBe(false);
  });

  it('names a bad option and its value', () => {
    expect(() => new AuthThrottle({ baseDelayMs: 0 })).toThrow(
      'baseDelayMs must be a whole number from 1 up, got 0',
    );
  });
});
