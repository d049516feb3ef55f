--[[
  Ends a call: replaces its estimate with what the provider reported, gives back a reservation
  that never reached the provider, and frees its concurrency slot.

  A reservation's stamp must never be earlier than the moment the provider admitted the call,
  or the window could forget it sooner than the provider does. So an open reservation is
  stamped now, unless `start` already stamped it when the response began.

  Input:
    KEYS[1] log    ZSET reservation id -> stamp ms
    KEYS[2] res    HASH reservation id -> "req|in|out|flags|scopes"
    KEYS[3] slots  ZSET reservation id -> lease expiry ms
    KEYS[4] tot    HASH "scope|dim" -> spend inside the window
    KEYS[5] stats  HASH counters
    KEYS[6] hist   HASH "bucket|name" -> per-bucket counters for the live view

    ARGV[1] now ms, or '' for Redis TIME
    ARGV[2] reservation id
    ARGV[3] mode: 'usage' (the provider answered), 'keep' (it may have been reached; charge
            the estimate), 'release' (it was never reached; give everything back)
    ARGV[4] actual input tokens (mode 'usage'; -1 keeps the estimate)
    ARGV[5] actual output tokens (mode 'usage'; -1 keeps the estimate)
    ARGV[6] '1' to restamp now even when the start already stamped it
    ARGV[7] history bucket length ms
    ARGV[8] output tokens the provider reported, for the counters only (-1 unknown); under
            'reserve' accounting the charge stays max_tokens but the estimate's accuracy
            is still worth knowing
    ARGV[9] channel to PUBLISH on when budget or a slot comes back (waiters wake), or ''

  Output:
    {1, inputDelta, outputDelta}   settled (deltas: actual minus reserved)
    {0}                            unknown reservation (it already left the window)
]]
--- @include "reservations"

local logKey, resKey, slotsKey, totKey, statsKey, histKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now = now_ms(ARGV[1])
local id = ARGV[2]
local mode = ARGV[3]

local freedSlot = redis.call('ZREM', slotsKey, id)
local channel = ARGV[9] or ''
local function wake()
  if channel ~= '' then redis.call('PUBLISH', channel, '1') end
end
local enc = redis.call('HGET', resKey, id)
if not enc then
  if freedSlot == 1 then wake() end
  return { 0 }
end
local r = decode(enc)

if mode == 'release' then
  add_totals(totKey, r, -1)
  redis.call('HDEL', resKey, id)
  redis.call('ZREM', logKey, id)
  redis.call('HINCRBY', statsKey, 'released', 1)
  -- 0 - x, not -x: Lua's -0 is sent as "-0", which HINCRBY refuses as not an integer.
  redis.call('HINCRBY', statsKey, 'reserved_in', 0 - r.inp)
  redis.call('HINCRBY', statsKey, 'reserved_out', 0 - r.out)
  wake()
  return { 1, 0 - r.inp, 0 - r.out }
end

local dIn, dOut = 0, 0
if mode == 'usage' then
  local actualIn, actualOut = tonumber(ARGV[4]), tonumber(ARGV[5])
  if actualIn >= 0 then dIn = actualIn - r.inp end
  if actualOut >= 0 then dOut = actualOut - r.out end
  if dIn ~= 0 or dOut ~= 0 then
    local delta = { req = 0, inp = dIn, out = dOut, scopes = r.scopes }
    add_totals(totKey, delta, 1)
    r.inp = r.inp + dIn
    r.out = r.out + dOut
  end
end

local reportedOut = tonumber(ARGV[8] or '-1')
if reportedOut < 0 then reportedOut = r.out end

local bucketMs = tonumber(ARGV[7])
local bucket = math.floor(now / bucketMs) * bucketMs
redis.call('HINCRBY', histKey, bucket .. '|calls', 1)
redis.call('HINCRBY', histKey, bucket .. '|reserved_in', r.inp - dIn)
redis.call('HINCRBY', histKey, bucket .. '|reserved_out', r.out - dOut)
redis.call('HINCRBY', histKey, bucket .. '|actual_in', r.inp)
redis.call('HINCRBY', histKey, bucket .. '|actual_out', reportedOut)
-- Keep about 20 minutes of buckets: drop the one that just fell out.
local old = bucket - 120 * bucketMs
redis.call('HDEL', histKey, old .. '|calls', old .. '|reserved_in', old .. '|reserved_out', old .. '|actual_in', old .. '|actual_out')

if r.flags ~= 's' or ARGV[6] == '1' then
  redis.call('ZADD', logKey, now, id)
end
r.flags = 's'
redis.call('HSET', resKey, id, encode(r))
redis.call('HINCRBY', statsKey, 'settled', 1)
redis.call('HINCRBY', statsKey, 'actual_in', r.inp)
redis.call('HINCRBY', statsKey, 'actual_out', reportedOut)
redis.call('HINCRBY', statsKey, 'settled_reserved_in', r.inp - dIn)
redis.call('HINCRBY', statsKey, 'settled_reserved_out', r.out - dOut)
if freedSlot == 1 or dIn < 0 or dOut < 0 then wake() end
return { 1, dIn, dOut }
