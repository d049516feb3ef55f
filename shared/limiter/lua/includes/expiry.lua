-- Needs "money".

-- What has left the window stays a while longer, out of the totals, under another name (`~id`,
-- its stamp moved down by GONE_SHIFT so that no range of live stamps meets it): a provider's
-- reading taken before it left but read after still counts it (see observe). Kept a tenth of
-- the window, at most 5 s (goneKeepMs in reader.ts says the same).
local GONE_SHIFT = 1e13
local GONE_FLOOR = -5e12
local function gone_keep_ms(windowMs) return math.min(5000, math.floor(windowMs / 10)) end
local function gone_name(id) return '~' .. id end

-- Drops the reservations whose stamp has left the window and takes them off the totals (they
-- are kept as gone, see above), and forgets the gone ones kept long enough. Bounded per call
-- (500 of each; returns the larger count); whatever is left over is still counted, which only
-- errs on the safe side.
local function expire_log(logKey, resKey, totKey, now, windowMs)
  local old = redis.call('ZRANGEBYSCORE', logKey, '-inf', now - windowMs - gone_keep_ms(windowMs) - GONE_SHIFT, 'LIMIT', 0, 500)
  if #old > 0 then
    redis.call('HDEL', resKey, unpack(old))
    redis.call('ZREM', logKey, unpack(old))
  end
  local ids = redis.call('ZRANGEBYSCORE', logKey, GONE_FLOOR, now - windowMs, 'WITHSCORES', 'LIMIT', 0, 500)
  if #ids == 0 then return #old end
  local names, t = {}, new_tally()
  for i = 1, #ids, 2 do names[#names + 1] = ids[i] end
  local encs = redis.call('HMGET', resKey, unpack(names))
  -- One HSET and one ZADD for the whole run: this is on every acquire's path.
  local fields, members = {}, {}
  for i, id in ipairs(names) do
    local enc = encs[i]
    if enc then
      tally_totals(t, decode(enc), -1)
      fields[#fields + 1] = gone_name(id)
      fields[#fields + 1] = enc
      members[#members + 1] = tonumber(ids[2 * i]) - GONE_SHIFT
      members[#members + 1] = gone_name(id)
    end
  end
  if #fields > 0 then
    redis.call('HSET', resKey, unpack(fields))
    redis.call('ZADD', logKey, unpack(members))
  end
  flush_tally(t, totKey)
  redis.call('HDEL', resKey, unpack(names))
  redis.call('ZREM', logKey, unpack(names))
  return math.max(#old, #names)
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

