/**
 * Resolves with the signal once the process receives SIGINT or SIGTERM, and stops listening: a
 * server command awaits this, closes its server and returns, so the process exits 0.
 */
export function untilStopSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve(signal);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
