--[[
  Admits one call when every dimension of every scope it belongs to has room, its money
  budgets have room for its worst-case cost and a concurrency slot is free, all at once (tokens,
  slot and money together); or admits nothing and says how long to wait.

  Waiters line up in KEYS[4] by priority, then arrival; only the first in line is admitted, so a
  large request is not starved by small ones and a more urgent one overtakes older ones.

  Input:
    KEYS[1]  log      ZSET reservation id -> stamp ms (an open call: its lease expiry)
    KEYS[2]  res      HASH reservation id -> "req|in|out|flags|scopes"
    KEYS[3]  slots    ZSET reservation id -> lease expiry ms (calls in flight)
    KEYS[4]  waiters  ZSET ticket -> rank (priority * 2^32 + arrival)
    KEYS[5]  waitexp  ZSET ticket -> expiry ms of the waiter's heartbeat
    KEYS[6]  seq      STRING arrival counter
    KEYS[7]  pause    STRING shared pause, until ms
    KEYS[8]  tot      HASH "scope|dim" -> spend inside the window
    KEYS[9]  ext      HASH "scope|dim" -> spend the provider reported and we did not make,
                      "scope|dim|until" -> when that report lapses; "|next", "|last" and
                      their "|until": what follows it, and the latest reading (see observe)
    KEYS[10] stats    HASH counters and the first waiter's next retry time
    KEYS[11] spend    HASH "<period id>|<budget or model:name>" -> µ$ spent (see money.lua)
    KEYS[12] held     HASH reservation id -> the money it holds (msgpack { µ$, fields })

    ARGV[1]  msgpack map (scripts.ts packs it):
      dims         the dimensions' short names in order: req, in, out, tok
      now          ms; absent for Redis TIME
      windowMs     the provider's window plus the margin
      ticket       becomes the reservation id when admitted
      priority     1 is the most urgent
      queue        true to keep a place in line when not admitted, false to try once
      leaseMs      lease of the concurrency slot and the open reservation
      ticketTtlMs  ttl of the waiter's place in line (renewed by each attempt)
      concurrency  limit of calls in flight, 0 for none
      cost         { req, inp, out, money }; money (absent: none) is a claim { micros, limits =
                   list of { field, budget, period, limit }, fields } held with the admission
      scopes       list of { name, limits = { req, in, out, tok }, full } (0 = unlimited;
                   headroom already taken off; `full`, when headroom is on: the limits before
                   it), the global scope first
      periods      the period ids whose spend is kept (this day, the day before, this month,
                   the month before), with any money claim
      extras       list of { id, req, inp, out, money, scopes }: the calls queued behind this
                   one, charged to its scopes unless they name their own (as `scopes` above),
                   each with its own money claim. Once this one is admitted they are admitted
                   too, in order, while each fits at once (tokens, money, a slot) and nobody
                   else stands in line (they never wait, never take a place in line, and the
                   first that does not fit ends the run). A worker fills several free slots in
                   one round trip this way.
      backfill     how many extras at most may go ahead of this call while it waits for budget
                   (0: none), each only if it fits now and this call would start no later for
                   it (see backfill.lua)
      probeMs      how long at most the others wait for a probe's reading (0: no probes)

  Probes. A waiter that was denied for budget while another client's spend was counted (the
  provider reported it, see observe) is admitted alone when room comes back: the first call
  admitted (for a window) when another like it would fit beside it goes as a probe, and nobody
  else is admitted until the provider's reading of it arrives (observe names it), its call
  ends, or probe ms pass. Room
  that comes back is what the other client also waits for (a 429's retry-after points at it):
  one call learns what it took before the rest of the room is spent. The last of the room
  beside that spend (its largest rise between two readings: about one of the other client's
  calls) is left to it (see need_of): its next call lands there, often while ours are on their
  way, and then both fit.

  Output:
    {0, now, leaseExpiry, k}            admitted (again, for a ticket admitted already), with
                                        the first k extras
    {1, waitMs}                         another waiter is first in line
    {2, waitMs}                         the shared pause holds
    {3, waitMs, scope, dim, i...}       not enough budget in scope/dim yet; extras i... were
                                        admitted to go ahead of it (backfill)
    {4, waitMs}                         every concurrency slot is taken
    {5, scope, dim, cost, limit}        the cost can never fit that limit
    {6, waitMs}                         a probe's reading is awaited
    {7, budget, period, spent, limit}   its money budget has no room for its worst case (µ$);
                                        it leaves the line
]]
--- @include "args"
--- @include "reservation"
--- @include "tally"
--- @include "money"
--- @include "expiry"
--- @include "foreign-spend"
--- @include "wait-time"
--- @include "admission"
--- @include "backfill"

local waitersKey, waitexpKey, seqKey, pauseKey = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local now = now_ms(args.now)
local ticket, queue, probeMs = args.ticket, args.queue, args.probeMs
local function names_of(scopes)
  local n = {}
  for i, s in ipairs(scopes) do n[i] = s.name end
  return n
end
local cost = { req = args.cost.req, inp = args.cost.inp, out = args.cost.out, flags = '',
  scopes = names_of(args.scopes), money = args.cost.money }
local extras = {}
for i, x in ipairs(args.extras) do
  extras[i] = { id = x.id, cost = { req = x.req, inp = x.inp, out = x.out, flags = '',
    scopes = x.scopes and names_of(x.scopes) or cost.scopes, limits = x.scopes, money = x.money } }
end
local run = {
  log = KEYS[1], res = KEYS[2], slots = KEYS[3], tot = KEYS[8], ext = KEYS[9], statsKey = KEYS[10],
  now = now, windowMs = args.windowMs, leaseExpiry = now + args.leaseMs, maxSlots = args.concurrency,
  scopes = args.scopes, cost = cost, totals = new_tally(), stats = new_tally(),
  money = { spend = KEYS[11], held = KEYS[12], periods = args.periods },
  leaveRoom = probeMs > 0, foreign = {},
}

local function leave_line()
  redis.call('ZREM', waitersKey, ticket)
  redis.call('ZREM', waitexpKey, ticket)
end

local function wait_as_head(code, waitMs, a, b)
  redis.call('HSET', run.statsKey, 'head_retry_at', now + waitMs)
  if not queue then leave_line() end
  if a then return { code, waitMs, a, b } end
  return { code, waitMs }
end

-- 1. The same ticket admitted already: ioredis resent this acquire after a reconnect, its
-- first run's answer lost. Answer the same again rather than charge it twice.
if redis.call('HEXISTS', run.res, ticket) == 1 then
  local lease = tonumber(redis.call('ZSCORE', run.slots, ticket) or now)
  local k = 0
  while k < #extras and redis.call('HEXISTS', run.res, extras[k + 1].id) == 1 do k = k + 1 end
  return { 0, lease - args.leaseMs, lease, k }
end

-- 2. A cost that can never fit is refused at once, whatever the line looks like.
for _, s in ipairs(run.scopes) do
  for _, d in ipairs(DIMS) do
    local limit = s.limits[d]
    local a = amount(cost, d)
    if limit > 0 and a > limit then
      leave_line()
      return { 5, s.name, d, a, limit }
    end
  end
end

-- 2b. Headroom covers what the window cannot see: another client's spend between readings, a
-- reading rounded by the provider. While the provider's readings are exact and show nobody
-- else's spend, the whole limit is used (never for a cost the headroom refused above).
local function lift_headroom(scopes)
  for _, s in ipairs(scopes) do
    if s.full then
      for _, d in ipairs(DIMS) do
        local full = s.full[d] or 0
        if s.limits[d] > 0 and full > s.limits[d]
          and seen_exactly(run_foreign(run, s.name .. '|' .. d), full) then
          s.limits[d] = full
        end
      end
    end
  end
end
lift_headroom(run.scopes)
for _, x in ipairs(extras) do
  if x.cost.limits then lift_headroom(x.cost.limits) end
end

-- 3. What has left the window, and lapsed leases, go.
expire_slots(run.slots, now, run.money)
expire_log(run.log, run.res, run.tot, now, run.windowMs)

-- 4. Waiters whose process stopped renewing their place leave the line.
local gone = redis.call('ZRANGEBYSCORE', waitexpKey, '-inf', now, 'LIMIT', 0, 100)
for _, t in ipairs(gone) do
  redis.call('ZREM', waitersKey, t)
  redis.call('ZREM', waitexpKey, t)
end

-- 5. Take or keep a place in line. A waiter keeps its arrival number; its priority may change
-- (the worker found a more urgent job).
local SHIFT = 4294967296
if queue then
  local rank = redis.call('ZSCORE', waitersKey, ticket)
  local arrival
  if rank then
    arrival = tonumber(rank) % SHIFT
  else
    arrival = redis.call('INCR', seqKey) % SHIFT
  end
  redis.call('ZADD', waitersKey, args.priority * SHIFT + arrival, ticket)
  redis.call('ZADD', waitexpKey, now + args.ticketTtlMs, ticket)
end

-- 6. Only the first in line goes on.
local head = redis.call('ZRANGE', waitersKey, 0, 0)[1]
if head ~= nil and head ~= ticket then
  local retryAt = tonumber(redis.call('HGET', run.statsKey, 'head_retry_at') or '0')
  return { 1, math.max(retryAt - now, 0) }
end

-- 6b. Money: a first in line whose budget has no room for its worst case leaves the line (its
-- job waits for the budget's next period, or is dead-lettered, by policy).
if cost.money then
  local l, spent = money_short(run.money, cost.money)
  if l then
    leave_line()
    redis.call('HDEL', run.statsKey, 'head_retry_at')
    return { 7, l.budget, l.period, spent, l.limit }
  end
end

-- 7. The shared pause.
local pausedUntil = tonumber(redis.call('GET', pauseKey) or '0')
if pausedUntil > now then
  return wait_as_head(2, pausedUntil - now)
end

-- 8. A probe is out: wait for its reading, unless its call has ended (slot freed) or time is
-- up. (probe[3]: a probe is due, see 11.)
local probe = redis.call('HMGET', run.ext, 'probe', 'probe|until', 'probe|due')
if probe[1] then
  local untilMs = tonumber(probe[2] or '0')
  if untilMs > now and redis.call('ZSCORE', run.slots, probe[1]) then
    return wait_as_head(6, untilMs - now)
  end
  redis.call('HDEL', run.ext, 'probe', 'probe|until')
end

-- 9. Budget: every dimension of every scope, with another client's spend; backfill meanwhile.
for _, s in ipairs(run.scopes) do
  for _, d in ipairs(DIMS) do
    if s.limits[d] > 0 then
      local need, f, kept = need_of(run, s, d, cost)
      if need > 0 then
        redis.call('HINCRBY', run.statsKey, 'denied_budget', 1)
        -- Another client's spend is counted here: the room this waiter gets may be its too
        -- (marked for a window at most: the waiter may leave the line instead).
        local besideForeign = probeMs > 0 and #f.steps > 0
        if besideForeign and queue then redis.call('HSET', run.ext, 'probe|due', now + run.windowMs) end
        local waitMs = wait_for(run.log, run.res, now, run.windowMs, s.name, d, need, f, kept)
        -- Not beside another client's spend while probes are on: room that reopens there goes
        -- to a probe.
        local filled = {}
        if args.backfill > 0 and queue and not besideForeign then
          filled = backfill(run, extras, args.backfill)
        end
        local reply = wait_as_head(3, waitMs, s.name, d)
        for _, i in ipairs(filled) do reply[#reply + 1] = i end
        return finish_run(run, reply)
      end
    end
  end
end

-- 10. A concurrency slot.
if run.maxSlots > 0 and redis.call('ZCARD', run.slots) >= run.maxSlots then
  local first = redis.call('ZRANGE', run.slots, 0, 0, 'WITHSCORES')
  local waitMs = 1
  if first[2] then waitMs = math.max(tonumber(first[2]) - now, 1) end
  redis.call('HINCRBY', run.statsKey, 'denied_slots', 1)
  return wait_as_head(4, waitMs)
end

-- 11. Admit, then the extras: only while the line is empty (they would overtake whoever
-- stands in it) and each fits every dimension and a slot right now; the first that does not
-- ends the run.
-- Room came back after a wait beside another client's spend, and more than this call fits: it
-- goes alone, as a probe (see above), while that spend is still counted.
local function foreign_held()
  for _, s in ipairs(run.scopes) do
    for _, d in ipairs(DIMS) do
      if s.limits[d] > 0 and #run_foreign(run, s.name .. '|' .. d).steps > 0 then return true end
    end
  end
  return false
end
admit(run, ticket, cost)
leave_line()
redis.call('HDEL', run.statsKey, 'head_retry_at')
-- The mark stays until a probe goes (or it lapses): room for one call may come back a few ms
-- before the rest.
local due = queue and tonumber(probe[3] or '0') or 0
local probing = due > now and fits_now(run, cost, 0) and foreign_held()
if probing or (due > 0 and due <= now) then redis.call('HDEL', run.ext, 'probe|due') end
local admitted = 0
if probing then
  redis.call('HSET', run.ext, 'probe', ticket, 'probe|until', now + probeMs)
  tally(run.stats, 'probes', 1)
elseif redis.call('ZCARD', waitersKey) == 0 then
  for i, x in ipairs(extras) do
    if redis.call('HEXISTS', run.res, x.id) == 1 or not fits_now(run, x.cost, 0) then break end
    admit(run, x.id, x.cost)
    admitted = i
  end
end
return finish_run(run, { 0, now, run.leaseExpiry, admitted })
