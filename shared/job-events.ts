/**
 * The entries of a job's event stream (`jobEventsKey`), as field/value pairs: `s` (the call
 * began; value the provider's request-id or ''), `e` + `d` (one SSE event: name and data), `end`
 * (nothing follows from this attempt), `w` (a reader woke itself; no content). The worker writes
 * them for jobs with `relayEvents`; the gateway reads them.
 */
export const EVENT_FIELDS = { start: 's', name: 'e', data: 'd', end: 'end', wake: 'w' } as const;
