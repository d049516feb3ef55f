/**
 * `/metrics` of one worker process, in Prometheus text: the runtime's own (CPU, memory, event
 * loop delay, GC, from prom-client's default collectors) and the worker's (calls in flight, its
 * gate loop). The fleet's figures (waits, tokens, 429s of every worker) are the dashboard's
 * `/metrics`, read from Redis; these are what only this process knows.
 */
import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import type { WorkerHealth } from './worker-options.ts';

/** A registry of its own, read from `health()` at each scrape. */
export function workerProcessMetrics(queue: string, health: () => WorkerHealth): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ queue });
  collectDefaultMetrics({ register: registry });
  const registers = [registry];
  const gauge = (name: string, help: string, read: (h: WorkerHealth) => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read(health()));
      },
    });
  // Counters cannot be set: each scrape resets them to the worker's own running total.
  const counter = (name: string, help: string, read: (h: WorkerHealth) => number) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        this.reset();
        this.inc(read(health()));
      },
    });
  gauge('llmq_worker_calls_in_flight', 'Provider calls this process is making.', (h) => h.inFlight);
  gauge(
    'llmq_worker_concurrency',
    'The most calls this process makes at once.',
    (h) => h.concurrency,
  );
  gauge(
    'llmq_worker_gate_step_seconds',
    'How long the gate has been in its current step (0 while every slot is busy).',
    (h) => h.stepMs / 1000,
  );
  gauge('llmq_worker_draining', '1 once the worker is stopping (SIGTERM), else 0.', (h) =>
    h.draining ? 1 : 0,
  );
  counter('llmq_worker_gate_rounds_total', 'Gate rounds this process has run.', (h) => h.rounds);
  counter(
    'llmq_worker_calls_started_total',
    'Provider calls this process has started.',
    (h) => h.calls,
  );
  return registry;
}
