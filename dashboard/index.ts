/**
 * The dashboard: Bull Board for every llmq queue and its dead letters, the limiter's live page,
 * and `/metrics` for Prometheus, behind Basic auth, a bearer token or a one-time token.
 */

export type { AccessResult, DashboardAuth } from './auth.ts';
export { AccessGuard, dashboardAuthFromEnv } from './auth.ts';
export type { Board, BoardOptions } from './board.ts';
export { mountBoard } from './board.ts';
export type { BreakerState, FleetReaderOptions, QueueView } from './fleet-reader.ts';
export { FleetReader } from './fleet-reader.ts';
export { redactSecrets } from './job-display.ts';
export { limiterPage } from './limiter-page.ts';
export { type DashboardFlags, resolveDashboardOptions } from './options.ts';
export { latencyHistogramText, PrometheusExporter } from './prometheus.ts';
export type { DashboardHandle, DashboardOptions } from './server.ts';
export { startDashboard } from './server.ts';
