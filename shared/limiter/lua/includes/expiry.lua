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
    if not readable(scope) then
      readings[scope] = {}
    end
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

-- The calls that left the window by now (one stamped at s counts while now < s + window, as a
-- provider's sliding window does), at most `most` of them: their ids, their spend per
-- "scope|dim" (`gone`), what of it the standing readings counted although the provider had
-- dropped it (`drops`, count_dropped), and what leaves the open sums (`opened`, add_open). Reads
-- only: expire_log drops them, a view leaves them out.
local function window_leavers(keys, now, windowMs, most)
  local entries =
    redis.call('ZRANGEBYSCORE', keys.log, '-inf', now - windowMs, 'WITHSCORES', 'LIMIT', 0, most)
  local ids, gone, drops, opened, readings = {}, {}, {}, {}, {}
  for i = 1, #entries, 2 do
    ids[#ids + 1] = entries[i]
  end
  if #ids == 0 then
    return ids, gone, drops, opened
  end
  for i, enc in ipairs(redis.call('HMGET', keys.res, unpack(ids))) do
    if enc then
      local reservation = decode(enc)
      local stamped = tonumber(entries[2 * i])
      add_spend(gone, reservation, 1)
      add_open(opened, reservation, -1)
      count_dropped(keys.view, readings, drops, reservation, stamped, now, windowMs)
    end
  end
  return ids, gone, drops, opened
end

-- How many calls that left the window a run drops at most (some 6 µs each: a run of about a
-- millisecond); the rest are still counted, which errs on the safe side, and go in the next runs.
-- A view leaves out as many as a run would drop (view-4.lua).
local LEAVERS_A_RUN = 150

-- Drops the calls that left the window: their spend moves from the window sums to what has left
-- (`scope|dim|left`), so window sum + left is all ever admitted (see view.lua); what a reading
-- counted although the provider had dropped it goes to its `drop`. At most LEAVERS_A_RUN a
-- call. Needs "reservation".
local function expire_log(keys, now, windowMs)
  local ids, gone, drops, opened = window_leavers(keys, now, windowMs, LEAVERS_A_RUN)
  if #ids == 0 then
    return 0
  end
  local moved, dropped = {}, {}
  for field, by in pairs(gone) do
    moved[field], moved[field .. '|left'] = -by, by
  end
  for field, by in pairs(opened) do
    moved[field] = by
  end
  for field, by in pairs(drops) do
    dropped[field .. '|drop'] = by
  end
  flush(moved, keys.tot)
  flush(dropped, keys.view)
  redis.call('HDEL', keys.res, unpack(ids))
  redis.call('ZREM', keys.log, unpack(ids))
  return #ids
end
