-- The end of money holds and of leases: the write path's (record), not acquire's.
-- Needs "money".

-- Ends the hold of `id`: settled to `micros` (0 gives it all back; nil leaves the worst case).
local function money_settle(moneyKeys, id, micros)
  local enc = redis.call('HGET', moneyKeys.held, id)
  if not enc then
    return
  end
  local hold = cmsgpack.unpack(enc)
  local heldMicros, fields = hold[1], hold[2]
  if micros and micros ~= heldMicros then
    for _, field in ipairs(fields) do
      redis.call('HINCRBY', moneyKeys.spend, field, micros - heldMicros)
    end
  end
  redis.call('HDEL', moneyKeys.held, id)
end

-- Once a day (only forwards): drops periods before the previous one; keeps both hashes two
-- months past the last day that held money.
local function money_keep(moneyKeys)
  if moneyKeys.kept then
    return
  end
  moneyKeys.kept = true
  local day = moneyKeys.periods and moneyKeys.periods[1]
  local seen = redis.call('HGET', moneyKeys.spend, '|day')
  if not day or (seen and seen >= day) then
    return
  end
  local keep, old = {}, {}
  for _, period in ipairs(moneyKeys.periods) do
    keep[period] = true
  end
  for _, field in ipairs(redis.call('HKEYS', moneyKeys.spend)) do
    local period = string.match(field, '^([^|]*)|')
    if period and period ~= '' and not keep[period] then
      old[#old + 1] = field
    end
  end
  if #old > 0 then
    redis.call('HDEL', moneyKeys.spend, unpack(old))
  end
  redis.call('HSET', moneyKeys.spend, '|day', day)
  redis.call('PEXPIRE', moneyKeys.spend, 5356800000)
  redis.call('PEXPIRE', moneyKeys.held, 5356800000)
end

-- Frees the slots whose lease ran out (the holder died or hung) and gives their money back;
-- their tokens stay in the window until it passes.
local function expire_slots(slotsKey, now, moneyKeys)
  local ids = redis.call('ZRANGEBYSCORE', slotsKey, '-inf', now, 'LIMIT', 0, 500)
  if #ids > 0 then
    redis.call('ZREM', slotsKey, unpack(ids))
  end
  for _, id in ipairs(ids) do
    money_settle(moneyKeys, id, 0)
  end
  return #ids
end
