--[[
  Admits one call when every dimension of every scope it belongs to has room and a concurrency
  slot is free, all at once; or admits nothing and says how long to wait.

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

    ARGV[1]  now ms, or '' for Redis TIME
    ARGV[2]  window ms (the provider's window plus the margin)
    ARGV[3]  ticket; becomes the reservation id when admitted
    ARGV[4]  priority, 1 is the most urgent
    ARGV[5]  '1' to keep a place in line when not admitted, '0' to try once
    ARGV[6]  lease ms of the concurrency slot and the open reservation
    ARGV[7]  ttl ms of the waiter's place in line (renewed by each attempt)
    ARGV[8]  concurrency limit, 0 for none
    ARGV[9]  requests   ARGV[10] input tokens   ARGV[11] output tokens
    ARGV[12] number of scopes n, then per scope: name, limits of req, in, out, tok
             (0 = unlimited; headroom already taken off)
    then     number of extras m, then per extra: ticket, requests, input, output tokens.
             Extras are the calls queued behind this one, charged to the same scopes: once
             this one is admitted they are admitted too, in order, while each fits at once and
             nobody else stands in line (they never wait, never take a place in line, and the
             first that does not fit ends the run). A worker fills several free slots in one
             round trip this way.
    then     backfill: how many extras at most may go ahead of this call while it waits for
             budget (0: none), each only if it fits now and this call would start no later
             for it (see below)
    then     probe ms: how long at most the others wait for a probe's reading (0: no probes)

  Probes. A waiter that was denied for budget while another client's spend was counted (the
  provider reported it, see observe) is admitted alone when room comes back: when another call
  like it would fit beside it, it goes as a probe, and nobody else is admitted until the
  provider's reading of it arrives (observe names it), its call ends, or probe ms pass. Room
  that comes back is what the other client also waits for (a 429's retry-after points at it):
  one call learns what it took before the rest of the room is spent.

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
]]
--- @include "reservations"

local logKey, resKey, slotsKey, waitersKey, waitexpKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local seqKey, pauseKey, totKey, extKey, statsKey = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]

local now = now_ms(ARGV[1])
local windowMs = tonumber(ARGV[2])
local ticket = ARGV[3]
local priority = tonumber(ARGV[4])
local queue = ARGV[5] == '1'
local leaseMs = tonumber(ARGV[6])
local ticketTtl = tonumber(ARGV[7])
local maxSlots = tonumber(ARGV[8])
local cost = { req = tonumber(ARGV[9]), inp = tonumber(ARGV[10]), out = tonumber(ARGV[11]), flags = '', scopes = {} }
local nScopes = tonumber(ARGV[12])
local scopes = {}
for i = 1, nScopes do
  local b = 12 + (i - 1) * 5
  local s = { name = ARGV[b + 1], limits = {
    req = tonumber(ARGV[b + 2]), ['in'] = tonumber(ARGV[b + 3]), out = tonumber(ARGV[b + 4]), tok = tonumber(ARGV[b + 5]) } }
  scopes[i] = s
  cost.scopes[i] = s.name
end
local extrasAt = 12 + nScopes * 5 + 1
local nExtras = tonumber(ARGV[extrasAt] or '0')
local backfill = tonumber(ARGV[extrasAt + nExtras * 4 + 1] or '0')
local probeMs = tonumber(ARGV[extrasAt + nExtras * 4 + 2] or '0')
local function extra(i)
  local b = extrasAt + (i - 1) * 4
  return ARGV[b + 1], { req = tonumber(ARGV[b + 2]), inp = tonumber(ARGV[b + 3]), out = tonumber(ARGV[b + 4]),
    flags = '', scopes = cost.scopes }
end

-- Totals and counters of the reservations this run admits, written once at its end.
local admittedTotals, admittedStats = new_tally(), new_tally()

local function leave_line()
  redis.call('ZREM', waitersKey, ticket)
  redis.call('ZREM', waitexpKey, ticket)
end

-- The same ticket admitted already: ioredis resent this acquire after a reconnect, its first
-- run's answer lost. Answer the same again rather than charge it twice.
if redis.call('HEXISTS', resKey, ticket) == 1 then
  local lease = tonumber(redis.call('ZSCORE', slotsKey, ticket) or now)
  local k = 0
  while k < nExtras and redis.call('HEXISTS', resKey, (extra(k + 1))) == 1 do k = k + 1 end
  return { 0, lease - leaseMs, lease, k }
end

-- A cost that can never fit is refused at once, whatever the line looks like.
for _, s in ipairs(scopes) do
  for _, d in ipairs(DIMS) do
    local limit = s.limits[d]
    local a = amount(cost, d)
    if limit > 0 and a > limit then
      leave_line()
      return { 5, s.name, d, a, limit }
    end
  end
end

expire_slots(slotsKey, now)
expire_log(logKey, resKey, totKey, now, windowMs)

-- Waiters whose process stopped renewing their place leave the line.
local gone = redis.call('ZRANGEBYSCORE', waitexpKey, '-inf', now, 'LIMIT', 0, 100)
for _, t in ipairs(gone) do
  redis.call('ZREM', waitersKey, t)
  redis.call('ZREM', waitexpKey, t)
end

-- Take or keep a place in line. A waiter keeps its arrival number; its priority may change
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
  redis.call('ZADD', waitersKey, priority * SHIFT + arrival, ticket)
  redis.call('ZADD', waitexpKey, now + ticketTtl, ticket)
end

local head = redis.call('ZRANGE', waitersKey, 0, 0)[1]
if head ~= nil and head ~= ticket then
  local retryAt = tonumber(redis.call('HGET', statsKey, 'head_retry_at') or '0')
  return { 1, math.max(retryAt - now, 0) }
end

local function wait_as_head(code, waitMs, a, b)
  redis.call('HSET', statsKey, 'head_retry_at', now + waitMs)
  if not queue then leave_line() end
  if a then return { code, waitMs, a, b } end
  return { code, waitMs }
end

local pausedUntil = tonumber(redis.call('GET', pauseKey) or '0')
if pausedUntil > now then
  return wait_as_head(2, pausedUntil - now)
end

-- A probe is out: wait for its reading, unless its call has ended (slot freed) or time is up.
-- (probe[3]: a probe is due, see the admission below.)
local probe = redis.call('HMGET', extKey, 'probe', 'probe|until', 'probe|due')
if probe[1] then
  local untilMs = tonumber(probe[2] or '0')
  if untilMs > now and redis.call('ZSCORE', slotsKey, probe[1]) then
    return wait_as_head(6, untilMs - now)
  end
  redis.call('HDEL', extKey, 'probe', 'probe|until')
end

-- How long until `need` of scope/dim has left the window: walk the log from its oldest stamp.
-- The provider-reported foreign spend steps down at its own times (foreign_of).
local function in_scope(r, scope)
  for _, s in ipairs(r.scopes) do
    if s == scope then return true end
  end
  return false
end

local function wait_for(scope, dim, need, f)
  local held = foreign_at(f, now, 0)
  local moments = foreign_moments(f, now)
  local m = 1
  local freed = 0
  local entries = redis.call('ZRANGE', logKey, 0, 1999, 'WITHSCORES')
  for i = 1, #entries, 2 do
    local at = tonumber(entries[i + 1]) + windowMs - now + 1
    -- A step of the foreign spend before this entry leaves may be enough with what left before.
    while moments[m] ~= nil and moments[m] <= at do
      local t = moments[m]
      if freed + held - foreign_at(f, now, t) >= need then return math.max(t, 1) end
      m = m + 1
    end
    local enc = redis.call('HGET', resKey, entries[i])
    if enc then
      local r = decode(enc)
      if in_scope(r, scope) then
        freed = freed + amount(r, dim)
        if freed + held - foreign_at(f, now, at) >= need then return math.max(at, 1) end
      end
    end
  end
  -- Not enough within the scanned part of a long log: look again when its last entry has left.
  if #entries >= 4000 then
    return math.max(tonumber(entries[#entries]) + windowMs - now + 1, 1)
  end
  while moments[m] ~= nil do
    local t = moments[m]
    if freed + held - foreign_at(f, now, t) >= need then return math.max(t, 1) end
    m = m + 1
  end
  return math.max(windowMs, 1)
end

-- What `c` lacks in scope s, dimension d, now (0 or less: it fits), and the foreign spend.
local function need_of(s, d, c)
  local field = s.name .. '|' .. d
  local used = tonumber(redis.call('HGET', totKey, field) or '0') + tallied(admittedTotals, field)
  local f = foreign_of(extKey, field, now)
  return used + foreign_at(f, now, 0) + amount(c, d) - s.limits[d], f
end

local leaseExpiry = now + leaseMs
-- An open reservation whose stamp is its lease expiry until the call starts or settles. What the
-- run admits is added to the totals and counters once, at its end (finish); need_of counts it.
local function admit(id, c)
  redis.call('ZADD', logKey, leaseExpiry, id)
  redis.call('HSET', resKey, id, encode(c))
  tally_totals(admittedTotals, c, 1)
  redis.call('ZADD', slotsKey, leaseExpiry, id)
  tally(admittedStats, 'admitted', 1)
  tally(admittedStats, 'reserved_in', c.inp)
  tally(admittedStats, 'reserved_out', c.out)
end

local function finish(reply)
  flush_tally(admittedTotals, totKey)
  flush_tally(admittedStats, statsKey)
  return reply
end

-- Whether c fits every dimension of every scope and a slot right now, leaving `spareSlots`.
local function fits_now(c, spareSlots)
  if maxSlots > 0 and redis.call('ZCARD', slotsKey) + 1 + spareSlots > maxSlots then return false end
  for _, s in ipairs(scopes) do
    for _, d in ipairs(DIMS) do
      if s.limits[d] > 0 and need_of(s, d, c) > 0 then return false end
    end
  end
  return true
end

-- When this call could start at the earliest if nothing else started before it: the latest of
-- its dimensions' waits (0 when it fits now), with `extra` more spend in the window.
local function start_of(extra)
  local t = 0
  for _, s in ipairs(scopes) do
    for _, d in ipairs(DIMS) do
      if s.limits[d] > 0 then
        local need, f = need_of(s, d, cost)
        need = need + amount(extra, d)
        if need > 0 then t = math.max(t, wait_for(s.name, d, need, f)) end
      end
    end
  end
  return t
end

for _, s in ipairs(scopes) do
  for _, d in ipairs(DIMS) do
    if s.limits[d] > 0 then
      local need, f = need_of(s, d, cost)
      if need > 0 then
        redis.call('HINCRBY', statsKey, 'denied_budget', 1)
        -- Another client's spend is counted here: the room this waiter gets may be its too
        -- (marked for a window at most: the waiter may leave the line instead).
        local besideForeign = probeMs > 0 and #f.steps > 0
        if besideForeign and queue then redis.call('HSET', extKey, 'probe|due', now + windowMs) end
        local waitMs = wait_for(s.name, d, need, f)
        -- Backfill: the calls behind this one that fit now and would not make it start any later
        -- (their spend is still in the window when it starts, so it must fit beside it then),
        -- leaving it a slot. Its start is the latest of its dimensions' (start_of). Not beside
        -- another client's spend while probes are on: room that reopens there goes to a probe.
        local filled = {}
        if backfill > 0 and queue and not besideForeign then
          local none = { req = 0, inp = 0, out = 0 }
          local startAt = start_of(none)
          for i = 1, nExtras do
            if #filled >= backfill then break end
            local id, c = extra(i)
            if redis.call('HEXISTS', resKey, id) == 1 then
              -- Tickets are new at every attempt: admitted already means by this very command,
              -- its first run's answer lost and ioredis sending it again.
              filled[#filled + 1] = i
            elseif fits_now(c, 1) and start_of(c) <= startAt then
              admit(id, c)
              tally(admittedStats, 'backfilled', 1)
              filled[#filled + 1] = i
            end
          end
        end
        local reply = wait_as_head(3, waitMs, s.name, d)
        for _, i in ipairs(filled) do reply[#reply + 1] = i end
        return finish(reply)
      end
    end
  end
end

if maxSlots > 0 and redis.call('ZCARD', slotsKey) >= maxSlots then
  local first = redis.call('ZRANGE', slotsKey, 0, 0, 'WITHSCORES')
  local waitMs = 1
  if first[2] then waitMs = math.max(tonumber(first[2]) - now, 1) end
  redis.call('HINCRBY', statsKey, 'denied_slots', 1)
  return wait_as_head(4, waitMs)
end

-- Admit, then the extras: only while the line is empty (they would overtake whoever stands in
-- it) and each fits every dimension and a slot right now; the first that does not ends the run.
admit(ticket, cost)
leave_line()
redis.call('HDEL', statsKey, 'head_retry_at')
-- Room came back after a wait beside another client's spend, and more than this call fits: it
-- goes alone, as a probe (see above), while that spend is still counted.
local function foreign_held()
  for _, s in ipairs(scopes) do
    for _, d in ipairs(DIMS) do
      if s.limits[d] > 0 and #foreign_of(extKey, s.name .. '|' .. d, now).steps > 0 then return true end
    end
  end
  return false
end
local due = queue and tonumber(probe[3] or '0') or 0
if due > 0 then redis.call('HDEL', extKey, 'probe|due') end
local probing = due > now and fits_now(cost, 0) and foreign_held()
local admitted = 0
if probing then
  redis.call('HSET', extKey, 'probe', ticket, 'probe|until', now + probeMs)
  tally(admittedStats, 'probes', 1)
elseif redis.call('ZCARD', waitersKey) == 0 then
  for i = 1, nExtras do
    local id, c = extra(i)
    if redis.call('HEXISTS', resKey, id) == 1 or not fits_now(c, 0) then break end
    admit(id, c)
    admitted = i
  end
end
return finish({ 0, now, leaseExpiry, admitted })
