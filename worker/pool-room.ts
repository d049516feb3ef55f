/**
 * The room each deployment of a pool has now, to order those of equal preference: the one with
 * the most room for the job goes first. Read from the limiter (one read-only script) only when a
 * choice has such a tie, kept {@link FRESH_MS}, less what this process admitted since.
 */
import { DIMENSIONS, type Dimension } from '../shared/dimensions.ts';
import type { Cost } from '../shared/estimate.ts';
import type { Limiter } from '../shared/limiter/limiter.ts';
import type { DimensionUse, ScopeSnapshot } from '../shared/limiter/types.ts';
import type { Deployment } from './pool.ts';

/** How long a reading of the deployments' room is used before it is read again (ms). */
const FRESH_MS = 100;

/** A deployment's room per dimension now; Infinity where nothing limits it. */
type Room = Record<Dimension, number>;

/** A cost in one dimension (`tokens`: input plus output). */
const amount = (c: Cost, d: Dimension): number =>
  d === 'tokens' ? c.inputTokens + c.outputTokens : c[d];

/** The room of one dimension as the view reads it, by the admission's rule (view-4.lua). */
const roomOf = (u: DimensionUse): number => Math.max(0, u.room ?? Number.POSITIVE_INFINITY);

/**
 * How many jobs of this cost a deployment has room for: its room in the dimension the job
 * takes most of (Infinity when no limit binds it; unknown deployments count as unlimited).
 */
export function fits(room: Room | undefined, cost: Cost): number {
  if (!room) return Number.POSITIVE_INFINITY;
  let n = Number.POSITIVE_INFINITY;
  for (const { name } of DIMENSIONS) {
    const c = amount(cost, name);
    if (c > 0) n = Math.min(n, room[name] / c);
  }
  return n;
}

/** Whether two deployments of a choice have the same preference (it is sorted by it). */
const hasTie = (ds: readonly Deployment[]): boolean =>
  ds.some((d, i) => i > 0 && d.rank === ds[i - 1]!.rank);

/** The deployments' room as read, for ordering ties. */
export class DeploymentRooms {
  private reading: { at: number; model: string | undefined; rooms: Map<string, Room> } | undefined;

  constructor(
    private readonly limiter: Pick<Limiter, 'scopeUse'>,
    private readonly clock: () => number = () => performance.now(),
  ) {}

  /**
   * By preference, then (among equal ones) the most room for this cost first, then list order;
   * `model`: the model scope the job is charged to (its fresh bucket may cover a deployment's).
   */
  async order(
    ds: readonly Deployment[],
    cost: Cost,
    model?: string,
  ): Promise<readonly Deployment[]> {
    if (!hasTie(ds)) return ds;
    const rooms = await this.read(ds, model);
    const fit = new Map(ds.map((d) => [d, fits(rooms.get(d.scope), cost)]));
    return [...ds].sort((a, b) => {
      if (a.rank !== b.rank) return a.rank - b.rank;
      const fa = fit.get(a)!;
      const fb = fit.get(b)!;
      return fb > fa ? 1 : fb < fa ? -1 : 0;
    });
  }

  /** This process admitted these into a deployment: its room is that much less until read again. */
  spent(d: Deployment, costs: readonly Cost[]): void {
    const room = this.reading?.rooms.get(d.scope);
    if (!room) return;
    for (const c of costs) for (const { name } of DIMENSIONS) room[name] -= amount(c, name);
  }

  private async read(
    ds: readonly Deployment[],
    model: string | undefined,
  ): Promise<Map<string, Room>> {
    const r = this.reading;
    const now = this.clock();
    const fresh = r && r.model === model && now - r.at < FRESH_MS;
    if (fresh && ds.every((d) => r.rooms.has(d.scope))) return r.rooms;
    const use = await this.limiter.scopeUse(
      ds.map((d) => d.scope),
      model,
    );
    const rooms = new Map(use.map((s) => [s.scope, roomOfScope(s)]));
    this.reading = { at: now, model, rooms };
    return rooms;
  }
}

function roomOfScope(s: ScopeSnapshot): Room {
  const room = {} as Room;
  for (const { name } of DIMENSIONS) room[name] = roomOf(s.dimensions[name]);
  return room;
}
