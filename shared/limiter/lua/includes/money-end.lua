-- The end of money holds and of leases: the write path's (record), not acquire's.
-- Needs "money".

-- Ends the hold of `id`: settled to `micros` (0 gives it all back; nil leaves the worst case).
local function money_settle(mk, id, micros)
  local enc = redis.call('HGET', mk.held, id)
  if not enc then
    return
  end
  local h = cmsgpack.unpack(enc)
  if micros and micros ~= h[1] then
    for _, f in ipairs(h[2]) do
      redis.call('HINCRBY', mk.spend, f, micros - h[1])
    end
  end
  redis.call('HDEL', mk.held, id)
end

-- Once a day (only forwards): drops periods before the previous one; keeps both hashes two
-- months past the last day that held money.
local function money_keep(mk)
  if mk.kept then
    return
  end
  mk.kept = true
  local day = mk.periods and mk.periods[1]
  local seen = redis.call('HGET', mk.spend, '|day')
  if not day or (seen and seen >= day) then
    return
  end
  local keep, old = {}, {}
  for _, p in ipairs(mk.periods) do
    keep[p] = true
  end
  for _, f in ipairs(redis.call('HKEYS', mk.spend)) do
    local p = string.match(f, '^([^|]*)|')
    if p and p ~= '' and not keep[p] then
      old[#old + 1] = f
    end
  end
  if #old > 0 then
    redis.call('HDEL', mk.spend, unpack(old))
  end
  redis.call('HSET', mk.spend, '|day', day)
  redis.call('PEXPIRE', mk.spend, 5356800000)
  redis.call('PEXPIRE', mk.held, 5356800000)
end

-- Frees the slots whose lease ran out (the holder died or hung) and gives their money back;
-- their tokens stay in the window until it passes.
local function expire_slots(slotsKey, now, mk)
  local ids = redis.call('ZRANGEBYSCORE', slotsKey, '-inf', now, 'LIMIT', 0, 500)
  if #ids > 0 then
    redis.call('ZREM', slotsKey, unpack(ids))
  end
  for _, id in ipairs(ids) do
    money_settle(mk, id, 0)
  end
  return #ids
end
