--[[
  Records what calls did, in this order: stamps (a response began), ends (settled to the usage,
  kept or released, with their money), the pause (a 429), the provider's readings (reading.lua).
  Lapsed leases and what left the window go first.

  KEYS[1] log (each key as in acquire-13.lua)
  KEYS[2] res
  KEYS[3] slots
  KEYS[4] tot
  KEYS[5] view
  KEYS[6] stats
  KEYS[7] spend
  KEYS[8] held
  KEYS[9] pause
  KEYS[10] takers
  ARGV[1] msgpack: dims, now (absent: TIME), windowMs, channel (SPUBLISH when budget or a slot
    comes back, or ''), split (output counted as produced), periods (money periods kept),
    stamps ({ id, ageMs: since its request was sent }), ends ({ id, mode = 'usage' | 'keep' | 'release', input, output, reported,
    micros: -1 unknown }), pauseMs, readings ({ scope, id, ageMs, refused (a 429's: no shape
    vote), dims = { [dim] = { limit, remaining, reset (ms, -1 unknown) } } })
  Output: { pausedUntil (0: none), now, dropped (left the window: at most LEAVERS_A_RUN a run,
    expiry.lua), then per end: known (0: already gone), inputDelta, outputDelta }; with nothing
  to record, it prunes (and leaves the window's keys to expire: window-keys.lua)
]]
--- @include "args"
--- @include "reservation"
--- @include "money"
--- @include "money-end"
--- @include "expiry"
--- @include "view"
--- @include "reading"
--- @include "window-keys"

-- The entry holding a begun call's request and input (flags "b", see reservation.lua).
local function input_part(id)
  return id .. ':in'
end

local logKey, resKey, slotsKey, totKey, viewKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local statsKey, pauseKey, takersKey = KEYS[6], KEYS[9], KEYS[10]
local now = now_ms(args.now)
local ctx = {
  log = logKey,
  res = resKey,
  tot = totKey,
  view = viewKey,
  now = now,
  windowMs = args.windowMs,
}
local moneyKeys = { spend = KEYS[7], held = KEYS[8], periods = args.periods }
local totals, stats = {}, {}
local wake = expire_slots(slotsKey, now, moneyKeys) > 0
local dropped = expire_log(ctx, now, args.windowMs)

local function count(sums, field, by)
  sums[field] = (sums[field] or 0) + by
end

-- The provider answered a call: its model's scopes (see admission.lua's `unknown`) are known.
-- Each scope is marked once a run.
local marked = {}
local function answered(reservation)
  for _, scope in ipairs(reservation.scopes) do
    local isModel = string.sub(scope, 1, 6) == 'model:'
    if isModel and not marked[scope] then
      marked[scope] = true
      if redis.call('HSETNX', viewKey, scope .. '|answered', 1) == 1 then
        wake = true
      end
    end
  end
end
-- A probe's answer began, or its call ended: the next call may go into its last room
-- (admission.lua's last_room). Only a reservation out as a probe reads the probes.
local function unprobe(id, reservation)
  if reservation.probe then
    reservation.probe = nil
    if end_probes(ctx, id) then
      wake = true
    end
  end
end

-- The reservations this run read or wrote, by id (false: none); a call stamped and ended in one
-- run is read once and written once. `write_res` writes the changed ones, before anything reads
-- the hash itself (readings, see reading.lua).
local cache, changed = {}, {}
local function load(id)
  if cache[id] == nil then
    local enc = redis.call('HGET', resKey, id)
    cache[id] = enc and decode(enc) or false
  end
  return cache[id] or nil
end
local function store(id, reservation)
  cache[id], changed[id] = reservation, true
end
local function write_res()
  local fields = {}
  for id in pairs(changed) do
    if cache[id] then
      fields[#fields + 1] = id
      fields[#fields + 1] = encode(cache[id])
    end
  end
  changed = {}
  for from = 1, #fields, 200 do
    redis.call('HSET', resKey, unpack(fields, from, math.min(from + 199, #fields)))
  end
end

-- The provider admitted the call: stamped now, sent `ageMs` ago (no earlier than admitted); with
-- `split`, only its request and input, in an entry of their own (its output is counted until the
-- end).
local function stamp(id, ageMs)
  local reservation = load(id)
  if not reservation or reservation.flags ~= '' then
    return
  end
  answered(reservation)
  unprobe(id, reservation)
  stop_awaiting(slotsKey, id, reservation)
  local sent = now - math.max(0, math.min(ageMs or 0, args.windowMs))
  reservation.sent = math.max(reservation.sent or sent, sent)
  if args.split then
    -- Its request and input leave the open sums as they go into their stamped entry.
    local part = {
      req = reservation.req,
      inp = reservation.inp,
      out = 0,
      flags = '',
      summed = reservation.summed,
      scopes = reservation.scopes,
    }
    add_open(totals, part, -1)
    part.flags, part.summed, part.sent = 's', nil, reservation.sent
    store(input_part(id), part)
    redis.call('ZADD', logKey, now, input_part(id))
    reservation.req, reservation.inp, reservation.flags = 0, 0, 'b'
  else
    add_open(totals, reservation, -1)
    reservation.flags = 's'
    redis.call('ZADD', logKey, now, id)
  end
  store(id, reservation)
end

-- A call begun before the reading settles. The provider had counted its input as it was: an
-- estimate above it is no room coming back (the reading's count follows it down); one below it
-- stays charged (the call may be late, see reading.lua). Its unused output (`refund` < 0) goes
-- back into the reading's bucket, which its capacity caps.
-- When each scope's readings were stored, read once a run (the run's own come after its ends).
local readTimes = {}
local function read_ats(scope)
  if not readable(scope) then
    return {}
  end
  if not readTimes[scope] then
    local at =
      redis.call('HMGET', viewKey, scope .. '|in|at', scope .. '|out|at', scope .. '|tok|at')
    readTimes[scope] = { ['in'] = tonumber(at[1]), out = tonumber(at[2]), tok = tonumber(at[3]) }
  end
  return readTimes[scope]
end

local function recount(id, scopes, dIn, refund)
  local stamped = nil
  local down = math.min(dIn, 0)
  -- Per dimension: what the reading's `seen` and (negated) `rem` move by.
  local moves = { ['in'] = { down, 0 }, out = { refund, refund }, tok = { down + refund, refund } }
  for _, scope in ipairs(scopes) do
    local readAts = read_ats(scope)
    for dim, move in pairs(moves) do
      local prefix = scope .. '|' .. dim .. '|'
      local readAt = readAts[dim]
      if readAt and not stamped then
        stamped = tonumber(redis.call('ZSCORE', logKey, id) or 'inf')
      end
      if readAt and stamped <= readAt then
        for field, by in pairs({ seen = move[1], rem = -move[2] }) do
          if by ~= 0 then
            redis.call('HINCRBY', viewKey, prefix .. field, by)
          end
        end
      end
    end
  end
end

local function forget(id, reservation)
  add_spend(totals, reservation, -1)
  add_open(totals, reservation, -1)
  cache[id], changed[id] = false, nil
  redis.call('HDEL', resKey, id)
  redis.call('ZREM', logKey, id)
end

-- A call's end ends its hold on its job (acquire-13.lua): a job its worker did not take is free
-- at once. A reservation gone took its hold's end along (it lapses by itself).
local function untake(reservation)
  if reservation.take then
    redis.call('ZREM', takersKey, reservation.take)
  end
end

-- What the money held for a call settles to: all back on release, the usage's cost when known,
-- else (nil) the worst case stays.
local function settled_micros(ending)
  if ending.mode == 'release' then
    return 0
  end
  if ending.mode == 'usage' and ending.micros >= 0 then
    return ending.micros
  end
  return nil
end

-- Settles the money a call holds; with none held by any call (no budget set), nothing to read.
local anyHeld = nil
local function settle_money(id, micros)
  if anyHeld == nil then
    anyHeld = redis.call('EXISTS', moneyKeys.held) == 1
  end
  if anyHeld then
    money_settle(moneyKeys, id, micros)
  end
end

-- One call's end; returns known, inputDelta, outputDelta.
local function finish(ending)
  local id = ending.id
  settle_money(id, settled_micros(ending))
  if redis.call('ZREM', slotsKey, id) == 1 then
    wake = true
  end
  local reservation = load(id)
  if not reservation then
    return 0, 0, 0
  end
  untake(reservation)
  unprobe(id, reservation)
  stop_awaiting(slotsKey, id, reservation)
  if ending.mode ~= 'release' then
    answered(reservation)
  end
  local part = reservation.flags == 'b' and load(input_part(id)) or nil
  local inp = reservation.inp + (part and part.inp or 0)
  if ending.mode == 'release' then
    forget(id, reservation)
    if part then
      forget(input_part(id), part)
    end
    for name, by in pairs({ released = 1, reserved_in = -inp, reserved_out = -reservation.out }) do
      count(stats, name, by)
    end
    wake = true
    return 1, -inp, -reservation.out
  end
  -- What it held open is no longer open: it ends as stamped.
  add_open(totals, reservation, -1)
  -- A begun call's input part gone: it left the window, the provider dropped it too.
  local holder = part or (reservation.flags ~= 'b' and reservation)
  local usage = ending.mode == 'usage'
  local dIn = (holder and usage and ending.input >= 0) and ending.input - holder.inp or 0
  local dOut = (usage and ending.output >= 0) and ending.output - reservation.out or 0
  add_spend(totals, { req = 0, inp = dIn, out = dOut, scopes = reservation.scopes }, 1)
  local refund = (reservation.flags == 's' and dOut < 0) and dOut or 0
  if (dIn ~= 0 or refund < 0) and holder.flags == 's' then
    recount(part and input_part(id) or id, reservation.scopes, dIn, refund)
  end
  if holder then
    holder.inp = holder.inp + dIn
  end
  reservation.out = reservation.out + dOut
  if part then
    store(input_part(id), part)
  end
  if reservation.flags ~= 's' then
    redis.call('ZADD', logKey, now, id)
  end
  reservation.flags = 's'
  store(id, reservation)
  local reported = ending.reported >= 0 and ending.reported or reservation.out
  for name, by in pairs({
    settled = 1,
    actual_in = inp + dIn,
    actual_out = reported,
    settled_reserved_in = inp,
    settled_reserved_out = reservation.out - dOut,
  }) do
    count(stats, name, by)
  end
  if dIn < 0 or dOut < 0 then
    wake = true
  end
  return 1, dIn, dOut
end

for _, entry in ipairs(args.stamps or {}) do
  stamp(entry.id, entry.ageMs)
end
local out = { 0, now, dropped }
for _, ending in ipairs(args.ends or {}) do
  local known, dIn, dOut = finish(ending)
  out[#out + 1], out[#out + 2], out[#out + 3] = known, dIn, dOut
end
write_res()
write_probes(ctx)
flush(totals, totKey)
if args.pauseMs then
  local pausedUntil = tonumber(redis.call('GET', pauseKey) or '0')
  local untilMs = math.max(now + args.pauseMs, pausedUntil)
  -- The value decides; the expiry only collects the key, a minute after the pause ends.
  redis.call('SET', pauseKey, untilMs, 'PX', math.max(untilMs - now, 1) + 60000)
  out[1] = untilMs
end
-- The readings read and write reservations through the run's cache, and share its copy of the
-- view; their earliest send starts their one read of the log (reading.lua).
ctx.load, ctx.store, ctx.write_res, ctx.split = load, store, write_res, args.split
ctx.views, ctx.shapes = {}, {}
for _, reading in ipairs(args.readings or {}) do
  ctx.earliestSent = math.min(ctx.earliestSent or math.huge, reading_sent(ctx, reading))
end
for _, reading in ipairs(args.readings or {}) do
  store_reading(ctx, reading)
end
write_res()
if #(args.stamps or {}) + #(args.ends or {}) + #(args.readings or {}) > 0 then
  keep_window(logKey, resKey, totKey, now, args.windowMs)
end
if args.periods then
  money_keep(moneyKeys)
end
flush(stats, statsKey)
if wake and args.channel ~= '' then
  redis.call('SPUBLISH', args.channel, '1')
end
return out
