--[[
  Admits a call when every scope·dimension has room in our window and the provider's projected
  view (docs/limiter.md), its money its worst case and a slot is free; or says how long to wait.
  Waiters line up by priority, then arrival; only the first goes on.

  KEYS[1]  log      ZSET id -> stamp (an open call: its lease's end)
  KEYS[2]  res      HASH id -> reservation (see reservation.lua)
  KEYS[3]  slots    ZSET id -> lease end (calls in flight)
  KEYS[4]  waiters  ZSET ticket -> priority * 2^32 + arrival
  KEYS[5]  waitexp  ZSET ticket -> heartbeat end
  KEYS[6]  seq      STRING arrivals
  KEYS[7]  pause    STRING the shared pause, until ms
  KEYS[8]  tot      HASH "scope|dim" -> window sum; "scope|dim|left" -> what left it;
    "scope|dim|open" -> what calls not begun hold (reservation.lua's add_open)
  KEYS[9]  view     HASH the provider's view (see view.lua)
  KEYS[10] stats    HASH counters
  KEYS[11] spend    HASH "<period>|<budget>" -> µ$ spent
  KEYS[12] held     HASH id -> the money it holds
  KEYS[13] takers   ZSET a job's id -> until when an admission's taker holds it (see below); its
    reservation names the job (`take`), and record-10.lua ends the hold with it
  ARGV[1] msgpack: dims, now (absent: TIME), windowMs, headroom, ticket (the reservation id once
    admitted), priority (1 first), queue (keep a place in line), leaseMs, ticketTtlMs,
    concurrency (0: none), cost { req, inp, out, money, take }, scopes ({ name, limits, slots }, global
    first; slots: how many of its calls may wait for their first answer at once, 0 none),
    extras ({ id, req, inp, out, money, take, scopes }: admitted with it while each fits, nobody
    waits, none is taken and the script has run less than budgetUs), takeMs (how long an
    admission holds its job),
    channel (SPUBLISH when it is admitted with others in line: the next is first now)
  Output: {0, now, leaseExpiry, k} admitted (again, if admitted already) with the first k extras;
    {1, waitMs} another is first in line; {2, waitMs} paused; {3, waitMs, scope, dim} no budget
    there yet; {4, waitMs} no slot (or a first call out); {4, waitMs, scope} that scope's calls
    waiting for their first answer hold its slots, or its last room's probe is out;
    {5, scope, dim, cost, limit} never fits;
    {7, budget, period, spent, limit} no money for its worst case (µ$; it leaves the line);
    {8, waitMs} another admission holds its job (another worker is taking that job: look again)
  `take` names the job an admission is for (the gate's: the job's id), so two workers that peeked
  the same jobs never both admit them: one admission, one taker. The hold ends with its
  reservation (a job its worker did not take is free at once), or after takeMs.
]]
--- @include "args"
--- @include "reservation"
--- @include "money"
--- @include "expiry"
--- @include "view"
--- @include "window-keys"
--- @include "admission"

-- Redis's clock in µs: how long the script has run (an injected `now` aside).
local function clock_us()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local startedUs = clock_us()

local waitersKey, waitexpKey, seqKey, pauseKey = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local takersKey = KEYS[13]
local now, ticket, queue = now_ms(args.now), args.ticket, args.queue
-- A call's cost as a reservation; `limits`: an extra's own scopes, else the head's.
local function charge(given, limits)
  local names = {}
  for i, scope in ipairs(limits or args.scopes) do
    names[i] = scope.name
  end
  return {
    req = given.req,
    inp = given.inp,
    out = given.out,
    flags = '',
    summed = true,
    money = given.money,
    limits = limits,
    scopes = names,
    take = given.take,
    sent = now,
  }
end
local cost = charge(args.cost)
local run = with_caches({
  log = KEYS[1],
  res = KEYS[2],
  slots = KEYS[3],
  tot = KEYS[8],
  view = KEYS[9],
  statsKey = KEYS[10],
  moneyKeys = { spend = KEYS[11], held = KEYS[12] },
  now = now,
  windowMs = args.windowMs,
  headroom = args.headroom,
  leaseExpiry = now + args.leaseMs,
  maxSlots = args.concurrency,
  scopes = args.scopes,
})
-- How soon a head held by a scope's unanswered calls tries again (an answer publishes nothing).
local SHARE_RETRY_MS = 250
-- How soon a head behind a probe tries again if no wake-up came (its answer publishes one).
local PROBE_RETRY_MS = 250
-- How soon a head another admission takes looks again (its taker moves it to active at once).
local TAKEN_RETRY_MS = 20
-- A waiter's rank is priority * ARRIVALS + arrival (2^32: arrivals wrap below the priority).
local ARRIVALS = 4294967296

local function drop(waiter)
  redis.call('ZREM', waitersKey, waiter)
  redis.call('ZREM', waitexpKey, waiter)
end
local function wait_as_head(reply)
  redis.call('HSET', run.statsKey, 'head_retry_at', now + reply[2])
  if not queue then
    drop(ticket)
  end
  return finish_run(run, reply)
end

-- 1. Admitted already: ioredis resent this acquire after a reconnect. Answer the same again.
if redis.call('HEXISTS', run.res, ticket) == 1 then
  local lease = tonumber(redis.call('ZSCORE', run.slots, ticket) or now)
  local extrasAdmitted = 0
  while
    extrasAdmitted < #args.extras
    and redis.call('HEXISTS', run.res, args.extras[extrasAdmitted + 1].id) == 1
  do
    extrasAdmitted = extrasAdmitted + 1
  end
  return { 0, lease - args.leaseMs, lease, extrasAdmitted }
end

-- 2. A cost above a limit less headroom never fits (short_of, step 8, asks whether it fits now).
for _, scope in ipairs(run.scopes) do
  for _, dim in ipairs(DIMS) do
    local _, _, most = limit_of(run, scope, dim)
    if most > 0 and amount(cost, dim) > most then
      drop(ticket)
      return { 5, scope.name, dim, amount(cost, dim), most }
    end
  end
end

-- 3. What left the window goes (lapsed leases go on the write path; a slot counts while live).
expire_log(run, now, run.windowMs)
-- It may have moved a reading's `drop`: read the readings afresh.
run.views = {}

-- 4. Taken: another worker's admission holds this call's job. It leaves the line (a place
-- held for a job another is taking would keep every other worker's rounds to one job) and
-- looks again soon.
redis.call('ZREMRANGEBYSCORE', takersKey, '-inf', now)
local function taken(call)
  return call.take and redis.call('ZSCORE', takersKey, call.take)
end
local holder = taken(cost)
if holder then
  drop(ticket)
  return { 8, math.min(tonumber(holder) - now, TAKEN_RETRY_MS) }
end
local holds = 0
local function take(id, call)
  if not call.take then
    return
  end
  redis.call('ZADD', takersKey, now + args.takeMs, call.take)
  holds = holds + 1
end
-- The last hold's end is the key's: an idle fleet keeps none.
local function keep_holds()
  if holds > 0 then
    redis.call('PEXPIRE', takersKey, args.takeMs)
  end
end

-- 5. The line: stale waiters leave; this one keeps its arrival (not its priority); the first goes on.
for _, stale in ipairs(redis.call('ZRANGEBYSCORE', waitexpKey, '-inf', now, 'LIMIT', 0, 100)) do
  drop(stale)
end
if queue then
  local rank = redis.call('ZSCORE', waitersKey, ticket)
  local arrival
  if rank then
    arrival = tonumber(rank) % ARRIVALS
  else
    arrival = redis.call('INCR', seqKey) % ARRIVALS
  end
  redis.call('ZADD', waitersKey, args.priority * ARRIVALS + arrival, ticket)
  redis.call('ZADD', waitexpKey, now + args.ticketTtlMs, ticket)
end
local head = redis.call('ZRANGE', waitersKey, 0, 0)[1]
if head ~= nil and head ~= ticket then
  local retryAt = tonumber(redis.call('HGET', run.statsKey, 'head_retry_at') or '0')
  return { 1, math.max(retryAt - now, 0) }
end

-- 6. Money: a head whose budget has no room for its worst case leaves the line.
local bound, spent = money_short(run.moneyKeys, cost.money or { limits = {} })
if bound then
  drop(ticket)
  redis.call('HDEL', run.statsKey, 'head_retry_at')
  return { 7, bound.budget, bound.period, spent, bound.limit }
end

-- 7. The shared pause.
local pausedUntil = tonumber(redis.call('GET', pauseKey) or '0')
if pausedUntil > now then
  return wait_as_head({ 2, pausedUntil - now })
end

-- 8. Budget in every scope and dimension; a model's unanswered first call holds it like a slot.
local shortScope, dim, need, rate, lapse = short_of(run, cost)
if shortScope and dim == 'req' and unanswered(run, shortScope) then
  return wait_as_head({ 4, args.leaseMs })
end
if shortScope then
  run.stats.denied_budget = 1
  local waitMs = wait_for(run, shortScope, dim, need, rate, lapse)
  return wait_as_head({ 3, waitMs, shortScope.name, dim })
end

-- 8b. The last room beside another client's spend goes by one probe at a time (admission.lua's
-- last_room): while one is out there, this call waits for its answer (a wake-up).
local lastRooms, probeOut = last_room(run, cost)
if probeOut then
  run.stats.denied_slots = 1
  return wait_as_head({ 4, PROBE_RETRY_MS, probeOut })
end

-- 9. A slot; and room in each scope's share of calls waiting for their first answer.
local busy = redis.call('ZCOUNT', run.slots, '(' .. now, '+inf')
if run.maxSlots > 0 and busy >= run.maxSlots then
  local first =
    redis.call('ZRANGEBYSCORE', run.slots, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  run.stats.denied_slots = 1
  return wait_as_head({ 4, math.max(tonumber(first[2] or now) - now, 1) })
end
local held = share_full(run, cost)
if held then
  run.stats.denied_slots = 1
  return wait_as_head({ 4, SHARE_RETRY_MS, held.name })
end

-- 10. Admit; then the extras, while nobody waits in line, each fits now (in their order) and
-- the script is within its budget: every other client of Redis waits while it runs.
send_probe(run, ticket, cost, lastRooms)
admit(run, ticket, cost)
take(ticket, cost)
drop(ticket)
redis.call('HDEL', run.statsKey, 'head_retry_at')
local extrasAdmitted = 0
if redis.call('ZCARD', waitersKey) == 0 then
  for i, extra in ipairs(args.extras) do
    local extraCost = charge(extra, extra.scopes)
    local full = run.maxSlots > 0 and busy + i >= run.maxSlots
    if
      full
      or clock_us() - startedUs >= args.budgetUs
      or redis.call('HEXISTS', run.res, extra.id) == 1
      or short_of(run, extraCost)
      or share_full(run, extraCost)
      or (extraCost.money and money_short(run.moneyKeys, extraCost.money))
      or taken(extraCost)
    then
      break
    end
    local extraRooms, out = last_room(run, extraCost)
    if out then
      break
    end
    send_probe(run, extra.id, extraCost, extraRooms)
    admit(run, extra.id, extraCost)
    take(extra.id, extraCost)
    extrasAdmitted = i
  end
elseif args.channel then
  redis.call('SPUBLISH', args.channel, '1')
end
keep_holds()
write_admitted(run)
keep_window(run.log, run.res, run.tot, now, run.windowMs)
return finish_run(run, { 0, now, run.leaseExpiry, extrasAdmitted })
