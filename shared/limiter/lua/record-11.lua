--[[
  Records what calls did, in this order: stamps (a response began), ends (settled to the usage,
  kept or released, with their money), the pause (a 429), the provider's readings (reading.lua).
  Lapsed leases and what left the window go first.

  KEYS[1] log (each key as in acquire-14.lua)
  KEYS[2] res
  KEYS[3] slots
  KEYS[4] tot
  KEYS[5] view
  KEYS[6] stats
  KEYS[7] spend
  KEYS[8] held
  KEYS[9] pause
  KEYS[10] takers
  KEYS[11] taking
  ARGV[1] msgpack: dims, now (absent: TIME), windowMs, channel (SPUBLISH when budget or a slot
    comes back, or ''), split (output counted as produced), periods (money periods kept),
    stamps (ids), ends ({ id, mode = 'usage' | 'keep' | 'release', input, output, reported,
    micros: -1 unknown }), pauseMs, readings ({ scope, id, ageMs, refused (a 429's: no shape
    vote), dims = { [dim] = { limit, remaining, reset (ms, -1 unknown) } } })
  Output: { pausedUntil (0: none), now, dropped (left the window: at most 500 a run), then per
    end: known (0: already gone), inputDelta, outputDelta }; with nothing to record, it prunes
  (and leaves the window's keys to expire: window-keys.lua)
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

local now = now_ms(args.now)
local ctx = {
  log = KEYS[1],
  res = KEYS[2],
  tot = KEYS[4],
  view = KEYS[5],
  now = now,
  windowMs = args.windowMs,
}
local mk = { spend = KEYS[7], held = KEYS[8], periods = args.periods }
local totals, stats = {}, {}
local wake = expire_slots(KEYS[3], now, mk) > 0
local dropped = expire_log(KEYS[1], KEYS[2], KEYS[4], now, args.windowMs)

local function count(t, f, n)
  t[f] = (t[f] or 0) + n
end

-- The provider answered a call: its model's scopes (see admission.lua's `unknown`) are known.
local function answered(r)
  for _, s in ipairs(r.scopes) do
    if
      string.sub(s, 1, 6) == 'model:' and redis.call('HSETNX', KEYS[5], s .. '|answered', 1) == 1
    then
      wake = true
    end
  end
end
local function store(id, r)
  redis.call('HSET', KEYS[2], id, encode(r))
end

-- The provider admitted the call: stamped now; with `split`, only its request and input, in an
-- entry of their own (its output is counted until the end).
local function stamp(id)
  local enc = redis.call('HGET', KEYS[2], id)
  local r = enc and decode(enc)
  if not r or r.flags ~= '' then
    return
  end
  answered(r)
  if args.split then
    store(input_part(id), { req = r.req, inp = r.inp, out = 0, flags = 's', scopes = r.scopes })
    redis.call('ZADD', KEYS[1], now, input_part(id))
    r.req, r.inp, r.flags = 0, 0, 'b'
  else
    r.flags = 's'
    redis.call('ZADD', KEYS[1], now, id)
  end
  store(id, r)
end

-- A call begun before the reading settles. The provider had counted its input as it was: an
-- estimate above it is no room coming back (the reading's count follows it down); one below it
-- stays charged (the call may be late, see reading.lua). Its unused output (`refund` < 0) goes
-- back into the reading's bucket, which its capacity caps.
local function recount(id, scopes, dIn, refund)
  local stamped = tonumber(redis.call('ZSCORE', KEYS[1], id) or 'inf')
  local down = math.min(dIn, 0)
  local by = { ['in'] = { down, 0 }, out = { refund, refund }, tok = { down + refund, refund } }
  for _, s in ipairs(scopes) do
    for d, c in pairs(by) do
      local f = s .. '|' .. d .. '|'
      if stamped <= tonumber(redis.call('HGET', KEYS[5], f .. 'at') or '-inf') then
        for k, n in pairs({ seen = c[1], rem = -c[2] }) do
          if n ~= 0 then
            redis.call('HINCRBY', KEYS[5], f .. k, n)
          end
        end
      end
    end
  end
end

local function forget(id, r)
  add_spend(totals, r, -1)
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
end

-- A call's end ends its hold on its job (acquire-14.lua): a job its worker did not take is free
-- at once.
local function untake(id)
  local c = redis.call('HGET', KEYS[11], id)
  if not c then
    return
  end
  redis.call('ZREM', KEYS[10], c)
  redis.call('HDEL', KEYS[11], id)
end

-- One call's end; returns known, inputDelta, outputDelta.
local function finish(e)
  untake(e.id)
  money_settle(
    mk,
    e.id,
    (e.mode == 'release' and 0) or (e.mode == 'usage' and e.micros >= 0 and e.micros) or nil
  )
  if redis.call('ZREM', KEYS[3], e.id) == 1 then
    wake = true
  end
  local enc = redis.call('HGET', KEYS[2], e.id)
  if not enc then
    return 0, 0, 0
  end
  local r = decode(enc)
  if e.mode ~= 'release' then
    answered(r)
  end
  local partEnc = r.flags == 'b' and redis.call('HGET', KEYS[2], input_part(e.id))
  local part = partEnc and decode(partEnc)
  local inp = r.inp + (part and part.inp or 0)
  if e.mode == 'release' then
    forget(e.id, r)
    if part then
      forget(input_part(e.id), part)
    end
    for name, n in pairs({ released = 1, reserved_in = -inp, reserved_out = -r.out }) do
      count(stats, name, n)
    end
    wake = true
    return 1, -inp, -r.out
  end
  -- A begun call's input part gone: it left the window, the provider dropped it too.
  local holder = part or (r.flags ~= 'b' and r)
  local dIn = (holder and e.mode == 'usage' and e.input >= 0) and e.input - holder.inp or 0
  local dOut = (e.mode == 'usage' and e.output >= 0) and e.output - r.out or 0
  add_spend(totals, { req = 0, inp = dIn, out = dOut, scopes = r.scopes }, 1)
  local refund = (r.flags == 's' and dOut < 0) and dOut or 0
  if (dIn ~= 0 or refund < 0) and holder.flags == 's' then
    recount(part and input_part(e.id) or e.id, r.scopes, dIn, refund)
  end
  if holder then
    holder.inp = holder.inp + dIn
  end
  r.out = r.out + dOut
  if part then
    store(input_part(e.id), part)
  end
  if r.flags ~= 's' then
    redis.call('ZADD', KEYS[1], now, e.id)
  end
  r.flags = 's'
  store(e.id, r)
  local reported = e.reported >= 0 and e.reported or r.out
  for name, n in pairs({
    settled = 1,
    actual_in = inp + dIn,
    actual_out = reported,
    settled_reserved_in = inp,
    settled_reserved_out = r.out - dOut,
  }) do
    count(stats, name, n)
  end
  if dIn < 0 or dOut < 0 then
    wake = true
  end
  return 1, dIn, dOut
end

for _, id in ipairs(args.stamps or {}) do
  stamp(id)
end
local out = { 0, now, dropped }
for _, e in ipairs(args.ends or {}) do
  local known, dIn, dOut = finish(e)
  out[#out + 1], out[#out + 2], out[#out + 3] = known, dIn, dOut
end
flush(totals, KEYS[4])
if args.pauseMs then
  local untilMs = math.max(now + args.pauseMs, tonumber(redis.call('GET', KEYS[9]) or '0'))
  -- The value decides; the expiry only collects the key, a minute after the pause ends.
  redis.call('SET', KEYS[9], untilMs, 'PX', math.max(untilMs - now, 1) + 60000)
  out[1] = untilMs
end
for _, g in ipairs(args.readings or {}) do
  store_reading(ctx, g)
end
if #(args.stamps or {}) + #(args.ends or {}) + #(args.readings or {}) > 0 then
  keep_window(KEYS[1], KEYS[2], KEYS[4], now, args.windowMs)
end
if args.periods then
  money_keep(mk)
end
flush(stats, KEYS[6])
if wake and args.channel ~= '' then
  redis.call('SPUBLISH', args.channel, '1')
end
return out
