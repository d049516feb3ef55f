import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Fails the run when a process a test started outlives the suite.
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // The machine has two cores and many tests measure real time against Redis and the
    // mock server; two files at once keeps them honest without starving each other.
    maxWorkers: 2,
    pool: 'forks',
  },
});
