--[[
  Fair share between tenants: orders the jobs at the head of the queue by whose turn it is, and
  charges what a tenant was served. Each tenant's service is counted in tokens divided by its
  weight (its "finish time"); the tenant furthest behind goes next. A tenant that had no work is
  brought up to the clock (the service of the last pick) so it does not get a burst for the time
  it was idle: deficit round robin over tokens, fleet-wide.

  Input:
    KEYS[1] fair     HASH tenant -> tokens / weight served, "|clock" -> the last pick's
    KEYS[2] tenants  ZSET fair share's index: tenant -> the same, for tenants with waiting jobs
    ARGV[1] op: order | charge
    order:  ARGV[2] how many jobs at most, then per tenant (in queue order): tenant, weight,
            k, then the tokens of its first k jobs in their order
    charge: ARGV[2] the key prefix of a tenant's jobs in the index (the tenant's name follows),
            ARGV[3..] tenant, weight, tokens, job id… for each admitted job (it leaves the
            index; a tenant with no jobs left there leaves the tenants' index)

  Output: order → the 1-based indexes of the tenants, one per job, in the order to serve them
          (each tenant's jobs in their own order; the first is the next pick); charge → 1
]]
local key = KEYS[1]
local clock = tonumber(redis.call('HGET', key, '|clock') or '0')
local function served_of(tenant)
  return math.max(tonumber(redis.call('HGET', key, tenant) or '0'), clock)
end
if ARGV[1] == 'charge' then
  local sums = {}
  for i = 3, #ARGV, 4 do
    local t = ARGV[i]
    sums[t] = (sums[t] or served_of(t)) + tonumber(ARGV[i + 2]) / tonumber(ARGV[i + 1])
    redis.call('ZREM', ARGV[2] .. t, ARGV[i + 3])
  end
  for t, v in pairs(sums) do
    redis.call('HSET', key, t, v)
    if redis.call('EXISTS', ARGV[2] .. t) == 1 then
      redis.call('ZADD', KEYS[2], 'XX', v, t)
    else
      redis.call('ZREM', KEYS[2], t)
    end
  end
  return 1
end
local want = tonumber(ARGV[2])
local ts = {}
local i = 3
while i <= #ARGV do
  local k = tonumber(ARGV[i + 2])
  local t = { weight = tonumber(ARGV[i + 1]), served = served_of(ARGV[i]), costs = {}, next = 1 }
  for j = 1, k do
    t.costs[j] = tonumber(ARGV[i + 2 + j])
  end
  ts[#ts + 1] = t
  i = i + 3 + k
end
-- Serving in turn as if each job were charged when picked: ties go to the tenant first in line.
local out, first = {}, nil
while #out < want do
  local best
  for idx, t in ipairs(ts) do
    if t.next <= #t.costs and (best == nil or t.served < ts[best].served) then
      best = idx
    end
  end
  if best == nil then
    break
  end
  local t = ts[best]
  if first == nil then
    first = t.served
  end
  out[#out + 1] = best
  t.served = t.served + t.costs[t.next] / t.weight
  t.next = t.next + 1
end
if first then
  redis.call('HSET', key, '|clock', tostring(first))
end
return out
