-- Needs "money".

-- Drops the reservations whose stamp has left the window and takes them off the totals.
-- Bounded per call; whatever is left over is still counted, which only errs on the safe side.
local function expire_log(logKey, resKey, totKey, now, windowMs)
  local ids = redis.call('ZRANGEBYSCORE', logKey, '-inf', now - windowMs, 'LIMIT', 0, 500)
  if #ids == 0 then return 0 end
  local encs = redis.call('HMGET', resKey, unpack(ids))
  local t = new_tally()
  for i = 1, #ids do
    if encs[i] then tally_totals(t, decode(encs[i]), -1) end
  end
  flush_tally(t, totKey)
  redis.call('HDEL', resKey, unpack(ids))
  redis.call('ZREM', logKey, unpack(ids))
  return #ids
end

-- Frees the concurrency slots whose lease ran out (their holder died or hung), and gives back
-- the money they held (`mk`, see money.lua); their tokens stay in the window until it passes.
local function expire_slots(slotsKey, now, mk)
  local ids = redis.call('ZRANGEBYSCORE', slotsKey, '-inf', now, 'LIMIT', 0, 500)
  if #ids > 0 then
    redis.call('ZREM', slotsKey, unpack(ids))
    for _, id in ipairs(ids) do money_settle(mk, id, 0) end
  end
  return #ids
end

