--[[
  Records one failed authentication from an address. From the `maxFailures`-th failure on
  (each within `windowMs` of the last; a success in between changes nothing), the address is refused for `baseMs`, doubling with each further failure, up to
  `maxMs`. The hash expires once no failure came for `windowMs` and no refusal runs.

  Input:
    KEYS[1] the address's failures  HASH failures, blocked_until (ms, Redis time)
    ARGV[1] maxFailures (1 up)
    ARGV[2] baseMs
    ARGV[3] maxMs
    ARGV[4] windowMs

  Output: { failures counted, ms the address is refused for now (0: not refused) }
]]
local key = KEYS[1]
local maxFailures = tonumber(ARGV[1])
local baseMs = tonumber(ARGV[2])
local maxMs = tonumber(ARGV[3])
local windowMs = tonumber(ARGV[4])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local failures = redis.call('HINCRBY', key, 'failures', 1)
local delay = 0
if failures >= maxFailures then
  delay = math.min(maxMs, baseMs * 2 ^ math.min(failures - maxFailures, 30))
  redis.call('HSET', key, 'blocked_until', now + delay)
end
redis.call('PEXPIRE', key, math.max(windowMs, delay))
return { failures, delay }
