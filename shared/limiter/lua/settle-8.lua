--[[
  Ends calls (several that ended at the same moment go in one run): replaces its estimate with
  what the provider reported, gives back a reservation that never reached the provider, and
  frees its concurrency slot; the money it holds is settled in the same step (see money.lua).

  A reservation's stamp must never be earlier than the moment the provider admitted the call,
  or the window could forget it sooner than the provider does. So an open reservation is
  stamped now, unless `start` already stamped it when the response began. Under 'actual'
  accounting the call's request and input were stamped then, in a part of their own (see
  start): its input is settled there, and only the output is stamped now.

  Input:
    KEYS[1] log    ZSET reservation id -> stamp ms
    KEYS[2] res    HASH reservation id -> "req|in|out|flags|scopes"
    KEYS[3] slots  ZSET reservation id -> lease expiry ms
    KEYS[4] tot    HASH "scope|dim" -> spend inside the window
    KEYS[5] stats  HASH counters
    KEYS[6] hist   HASH "bucket|name" -> per-bucket counters for the live view
    KEYS[7] spend  HASH "<period id>|<budget or model:name>" -> µ$ spent
    KEYS[8] held   HASH reservation id -> the money it holds

    ARGV[1] msgpack map (scripts.ts packs it):
      dims      the dimensions' short names in order
      now       ms; absent for Redis TIME
      bucketMs  history bucket length
      channel   to SPUBLISH on (it carries the queue's hash tag) when budget or a slot comes back (waiters wake), or ''
      calls     list of {
        id        reservation id
        mode      'usage' (the provider answered), 'keep' (it may have been reached; charge
                  the estimate), 'release' (it was never reached; give everything back)
        input     actual input tokens (mode 'usage'; -1 keeps the estimate)
        output    actual output tokens (mode 'usage'; -1 keeps the estimate)
        restamp   true to restamp now even when the start already stamped it
        reported  output tokens the provider reported, for the counters only (-1 unknown);
                  under 'reserve' accounting the charge stays max_tokens but the estimate's
                  accuracy is still worth knowing
        micros    the call's actual cost in µ$ (mode 'usage'; -1: unknown, its worst case
                  stays spent). 'keep' leaves the worst case spent, 'release' gives it back
        parts     optional, mode 'usage' of a begun call ('actual' accounting): the output that
                  had arrived by earlier moments, { ms ago, tokens } each (see split_output) }

  Output: per call, three values: known (1, or 0 for a reservation that already left the
  window), inputDelta, outputDelta (actual minus reserved). One SPUBLISH for the whole run.
]]
--- @include "args"
--- @include "reservation"
--- @include "tally"
--- @include "money"

local logKey, resKey, slotsKey, totKey, statsKey, histKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local mk = { spend = KEYS[7], held = KEYS[8] }
local now = now_ms(args.now)
local bucketMs = args.bucketMs
local channel = args.channel or ''
local bucket = math.floor(now / bucketMs) * bucketMs
local wake = false
local out = {}
-- The run's increments, written once each at the end.
local totals, stats, hist = new_tally(), new_tally(), new_tally()

-- A streamed call's output came over its whole length, and a provider counts each token as it
-- is produced: the parts that had arrived by given moments (`parts`, { ago ms, tokens },
-- oldest first) go in entries of their own (`<id>:o1`…) stamped then, never before the
-- response began; only the rest is stamped at the end. The totals do not change.
local function split_output(id, r, parts)
  if not parts then return end
  local begun = tonumber(redis.call('ZSCORE', logKey, input_part(id)) or '0')
  for k, p in ipairs(parts) do
    local tokens = math.min(math.floor(p[2]), r.out)
    if tokens > 0 then
      local at = math.min(math.max(now - p[1], begun), now)
      local pid = output_part(id, k)
      redis.call('HSET', resKey, pid, encode({ req = 0, inp = 0, out = tokens, flags = 's', scopes = r.scopes }))
      redis.call('ZADD', logKey, at, pid)
      r.out = r.out - tokens
      -- What was given back stays as it was (observe reads it as out - rout).
      if r.rout then r.rout = r.rout - tokens end
    end
  end
end

local function settle_one(id, mode, actualIn, actualOut, restamp, reportedOut, micros, parts)
  -- Money first: a call longer than the window still holds it after its tokens left.
  if mode == 'release' then
    money_settle(mk, id, 0)
  elseif mode == 'usage' and micros and micros >= 0 then
    money_settle(mk, id, micros)
  else
    money_settle(mk, id, nil)
  end
  local freedSlot = redis.call('ZREM', slotsKey, id)
  if freedSlot == 1 then wake = true end
  local enc = redis.call('HGET', resKey, id)
  if not enc then return 0, 0, 0 end
  local r = decode(enc)
  -- A begun call's request and input live in a part of their own (see start), gone once it
  -- has left the window: then the provider has dropped them too, and there is nothing to adjust.
  local partId, part = nil, nil
  if r.flags == 'b' then
    partId = input_part(id)
    local penc = redis.call('HGET', resKey, partId)
    if penc then part = decode(penc) end
  end
  local function input_now() return r.inp + (part and part.inp or 0) end

  if mode == 'release' then
    local inp = input_now()
    tally_totals(totals, r, -1)
    redis.call('HDEL', resKey, id)
    redis.call('ZREM', logKey, id)
    if part then
      tally_totals(totals, part, -1)
      redis.call('HDEL', resKey, partId)
      redis.call('ZREM', logKey, partId)
    end
    tally(stats, 'released', 1)
    tally(stats, 'reserved_in', 0 - inp)
    tally(stats, 'reserved_out', 0 - r.out)
    wake = true
    return 1, 0 - inp, 0 - r.out
  end

  local dIn, dOut = 0, 0
  if mode == 'usage' then
    local holder = r
    if partId then holder = part end
    if actualIn >= 0 and holder then dIn = actualIn - holder.inp end
    if actualOut >= 0 then dOut = actualOut - r.out end
    if dIn ~= 0 then
      tally_totals(totals, { req = 0, inp = dIn, out = 0, scopes = r.scopes }, 1)
      holder.inp = holder.inp + dIn
      if holder == part then redis.call('HSET', resKey, partId, encode(part)) end
    end
    if dOut ~= 0 then
      tally_totals(totals, { req = 0, inp = 0, out = dOut, scopes = r.scopes }, 1)
      if dOut < 0 and r.rout == nil then r.rout = r.out end
      r.out = r.out + dOut
    end
  end

  if reportedOut < 0 then reportedOut = r.out end
  local inp = input_now()

  tally(hist, bucket .. '|calls', 1)
  tally(hist, bucket .. '|reserved_in', inp - dIn)
  tally(hist, bucket .. '|reserved_out', r.out - dOut)
  tally(hist, bucket .. '|actual_in', inp)
  tally(hist, bucket .. '|actual_out', reportedOut)

  if r.flags ~= 's' or restamp then
    redis.call('ZADD', logKey, now, id)
  end
  if partId and mode == 'usage' and actualOut >= 0 then split_output(id, r, parts) end
  r.flags = 's'
  redis.call('HSET', resKey, id, encode(r))
  tally(stats, 'settled', 1)
  tally(stats, 'actual_in', inp)
  tally(stats, 'actual_out', reportedOut)
  tally(stats, 'settled_reserved_in', inp - dIn)
  tally(stats, 'settled_reserved_out', r.out - dOut)
  if dIn < 0 or dOut < 0 then wake = true end
  return 1, dIn, dOut
end

for _, c in ipairs(args.calls) do
  local known, dIn, dOut = settle_one(c.id, c.mode, c.input, c.output, c.restamp, c.reported, c.micros, c.parts)
  out[#out + 1] = known
  out[#out + 1] = dIn
  out[#out + 1] = dOut
end

flush_tally(totals, totKey)
flush_tally(stats, statsKey)
flush_tally(hist, histKey)

-- Keep about 20 minutes of buckets: drop the one that just fell out.
local old = bucket - 120 * bucketMs
redis.call('HDEL', histKey, old .. '|calls', old .. '|reserved_in', old .. '|reserved_out', old .. '|actual_in', old .. '|actual_out')
if wake and channel ~= '' then redis.call('SPUBLISH', channel, '1') end
return out
