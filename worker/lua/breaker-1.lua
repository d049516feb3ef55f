--[[
  The circuit breaker every worker process shares. After `threshold` consecutive provider
  failures it opens; while open nobody calls; after the cool-down one process holds a trial
  call, whose outcome closes it again or re-opens it.

  Input:
    KEYS[1] breaker  HASH state ('closed' | 'open' | 'half_open'), failures, open_until,
                     trial (holder token), trial_until, opened_at (when the current outage
                     began), outage_ms (the length of the outages that ended)
    ARGV[1] now ms, or '' for Redis TIME
    ARGV[2] op: 'check' | 'success' | 'failure' | 'abandon' (the trial holder stops without
            calling: another process may make the trial at once)
    ARGV[3] holder token (a process's id)
    ARGV[4] threshold (consecutive failures that open it)
    ARGV[5] cool-down ms
    ARGV[6] trial ttl ms (how long a trial holder may take before another may try)

  Output:
    check:   {1, 0, failures} call allowed (closed, with the consecutive failures so far); {1, 1} allowed as the trial call; {0, waitMs} not allowed
    success: {1, 0}
    abandon: {1, 1} when this process held the trial and gave it up, else {1, 0}
    failure: {1, opened, whileClosed, outageMs, now} where opened is 1 when this failure opened
             the breaker, whileClosed is 1 when the breaker was closed before it and stays closed
             (a failure of a call still under way when another opened it, or of a trial, is 0),
             outageMs is the time the breaker has not been closed, in all (the current outage
             too): a job's retryFor leaves it out; now is the time it used (ms)
]]
local key = KEYS[1]
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local op, token = ARGV[2], ARGV[3]
local threshold, cooldown, trialTtl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local stored = redis.call(
  'HMGET',
  key,
  'state',
  'failures',
  'open_until',
  'trial',
  'trial_until',
  'opened_at',
  'outage_ms'
)
local state = stored[1] or 'closed'
local failures = tonumber(stored[2] or '0')
local openUntil = tonumber(stored[3] or '0')
local trial, trialUntil = stored[4], tonumber(stored[5] or '0')
local openedAt, outageMs = tonumber(stored[6] or ''), tonumber(stored[7] or '0')

if op == 'check' then
  if state == 'closed' then
    return { 1, 0, failures }
  end
  if state == 'open' and now < openUntil then
    return { 0, openUntil - now }
  end
  -- Cool-down over (or the trial holder vanished): one process makes the trial call.
  if trial == token then
    return { 1, 1 }
  end
  if trial and trialUntil > now then
    return { 0, math.min(trialUntil - now, 1000) }
  end
  redis.call('HSET', key, 'state', 'half_open', 'trial', token, 'trial_until', now + trialTtl)
  return { 1, 1 }
end

if op == 'abandon' then
  if trial == token and state == 'half_open' then
    redis.call('HSET', key, 'state', 'open', 'open_until', now)
    redis.call('HDEL', key, 'trial', 'trial_until')
    return { 1, 1 }
  end
  return { 1, 0 }
end

if op == 'success' then
  if state ~= 'closed' or failures > 0 then
    redis.call('HSET', key, 'state', 'closed', 'failures', 0)
    redis.call('HDEL', key, 'trial', 'trial_until', 'open_until', 'opened_at')
    if state ~= 'closed' then
      redis.call('HINCRBY', key, 'closed_count', 1)
      if openedAt then
        redis.call('HINCRBY', key, 'outage_ms', math.max(0, now - openedAt))
      end
    end
  end
  return { 1, 0 }
end

-- failure
failures = failures + 1
if state == 'half_open' or (state == 'closed' and failures >= threshold) then
  redis.call('HSET', key, 'state', 'open', 'failures', failures, 'open_until', now + cooldown)
  redis.call('HDEL', key, 'trial', 'trial_until')
  redis.call('HINCRBY', key, 'opened_count', 1)
  -- A trial that failed carries on the outage it was part of.
  if not openedAt then
    openedAt = now
    redis.call('HSET', key, 'opened_at', now)
  end
  return { 1, 1, 0, outageMs + now - openedAt, now }
end
redis.call('HSET', key, 'failures', failures)
if state == 'closed' then
  return { 1, 0, 1, outageMs, now }
end
-- Already open (a call under way when another opened it): the current outage counts too.
local current = openedAt and math.max(0, now - openedAt) or 0
return { 1, 0, 0, outageMs + current, now }
