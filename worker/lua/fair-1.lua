--[[
  Fair share between tenants: picks whose turn it is among the tenants with work at the head of
  the queue, and charges what a tenant was served. Each tenant's service is counted in tokens
  divided by its weight (its "finish time"); the tenant furthest behind goes next. A tenant that
  had no work is brought up to the clock (the service of the last pick) so it does not get a
  burst for the time it was idle: deficit round robin over tokens, fleet-wide.

  Input:
    KEYS[1] fair  HASH tenant -> tokens / weight served, "|clock" -> the last pick's
    ARGV[1] op: pick | charge
    pick:   ARGV[2..] tenant, weight, tenant, weight… (in queue order)
    charge: ARGV[2] tenant, ARGV[3] weight, ARGV[4] tokens

  Output: pick → the 1-based index of the chosen tenant; charge → 1
]]
local key = KEYS[1]
local clock = tonumber(redis.call('HGET', key, '|clock') or '0')
if ARGV[1] == 'charge' then
  local served = math.max(tonumber(redis.call('HGET', key, ARGV[2]) or '0'), clock)
  redis.call('HSET', key, ARGV[2], served + tonumber(ARGV[4]) / tonumber(ARGV[3]))
  return 1
end
local best, bestServed = 1, nil
for i = 2, #ARGV, 2 do
  local served = math.max(tonumber(redis.call('HGET', key, ARGV[i]) or '0'), clock)
  if bestServed == nil or served < bestServed then
    best, bestServed = i / 2, served
  end
end
redis.call('HSET', key, '|clock', tostring(bestServed))
return best
