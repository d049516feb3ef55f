-- Drops the reservations that left the window (one stamped at s counts while now < s + window,
-- as a provider's sliding window does): their spend moves from the window sums to what has
-- left (`scope|dim|left`), so window sum + left is all ever admitted (see view.lua). At most 500
-- a call; the rest is still counted, which errs on the safe side. Needs "reservation".
local function expire_log(logKey, resKey, totKey, now, windowMs)
  local ids = redis.call('ZRANGEBYSCORE', logKey, '-inf', now - windowMs, 'LIMIT', 0, 500)
  if #ids == 0 then
    return 0
  end
  local sums = {}
  for _, enc in ipairs(redis.call('HMGET', resKey, unpack(ids))) do
    if enc then
      local reservation = decode(enc)
      add_spend(sums, reservation, -1)
      add_spend(sums, reservation, 1, '|left')
    end
  end
  flush(sums, totKey)
  redis.call('HDEL', resKey, unpack(ids))
  redis.call('ZREM', logKey, unpack(ids))
  return #ids
end
