-- The window's keys (log, res, tot) expire together once every entry has left the window, so
-- an idle fleet keeps none of them: a window past the last stamp, and at least a window from
-- now (a reading recorded now lapses then, and needs tot's `left` until it does). Called by
-- every run that stamps; a prune alone does not keep them.
local function keep_window(logKey, resKey, totKey, now, windowMs)
  local last = redis.call('ZRANGE', logKey, -1, -1, 'WITHSCORES')[2]
  local ttl = math.max(tonumber(last or now), now) + windowMs - now
  redis.call('PEXPIRE', logKey, ttl)
  redis.call('PEXPIRE', resKey, ttl)
  redis.call('PEXPIRE', totKey, ttl)
end
