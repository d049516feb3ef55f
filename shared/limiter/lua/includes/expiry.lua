-- A call leaving our window that the stored reading of one of its scopes counted (stamped by
-- the time it was stored) may have left the provider's window before that reading: admitted a
-- window or more before the reading's call was sent. Its room then came back in the reading's
-- `rem`, and leaving ours would give it back a second time, so it goes into the reading's `drop`
-- (view.lua), summed per "scope|dim" in `sums`. Both sends stand for the provider's admissions,
-- which follow them by a like delay (docs/limiter.md). `readings` caches each scope's reading
-- times (when stored, when its call was sent).
local function count_dropped(viewKey, readings, sums, reservation, stamped, now, windowMs)
  local sent = reservation.sent or -math.huge
  for _, scope in ipairs(reservation.scopes) do
    if not readings[scope] then
      local fields = {}
      for _, dim in ipairs(DIMS) do
        fields[#fields + 1] = scope .. '|' .. dim .. '|at'
        fields[#fields + 1] = scope .. '|' .. dim .. '|sent'
      end
      readings[scope] = redis.call('HMGET', viewKey, unpack(fields))
    end
    for i, dim in ipairs(DIMS) do
      local readAt = tonumber(readings[scope][2 * i - 1] or '')
      local sentAt = tonumber(readings[scope][2 * i] or '')
      local live = readAt and sentAt and now < readAt + windowMs
      if live and stamped <= readAt and sent <= sentAt - windowMs then
        local field = scope .. '|' .. dim
        sums[field] = (sums[field] or 0) + amount(reservation, dim)
      end
    end
  end
end

-- Drops the reservations that left the window (one stamped at s counts while now < s + window,
-- as a provider's sliding window does): their spend moves from the window sums to what has
-- left (`scope|dim|left`), so window sum + left is all ever admitted (see view.lua); what a
-- reading counted although the provider had dropped it goes to its `drop` (count_dropped). At
-- most 500 a call; the rest is still counted, which errs on the safe side. Needs "reservation".
local function expire_log(logKey, resKey, totKey, viewKey, now, windowMs)
  local entries =
    redis.call('ZRANGEBYSCORE', logKey, '-inf', now - windowMs, 'WITHSCORES', 'LIMIT', 0, 500)
  if #entries == 0 then
    return 0
  end
  local ids, stamps = {}, {}
  for i = 1, #entries, 2 do
    ids[#ids + 1], stamps[#stamps + 1] = entries[i], tonumber(entries[i + 1])
  end
  local sums, drops, readings = {}, {}, {}
  for i, enc in ipairs(redis.call('HMGET', resKey, unpack(ids))) do
    if enc then
      local reservation = decode(enc)
      add_spend(sums, reservation, -1)
      add_spend(sums, reservation, 1, '|left')
      count_dropped(viewKey, readings, drops, reservation, stamps[i], now, windowMs)
    end
  end
  flush(sums, totKey)
  for field, by in pairs(drops) do
    redis.call('HINCRBY', viewKey, field .. '|drop', by)
  end
  redis.call('HDEL', resKey, unpack(ids))
  redis.call('ZREM', logKey, unpack(ids))
  return #ids
end
