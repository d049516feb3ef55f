--[[
  Drops reservations once their jobs were added (or the add failed). After an add, a tenant's
  member stays, marked as added (score 1), and so do the jobs' sizes, so the bounds see the job
  until it leaves the waiting states. After a failed add the members and sizes go too: nothing
  of a job that does not exist is left behind.

  An added job waiting in the prioritized set also goes into fair share's index: the tenant's
  jobs by BullMQ's score, and the tenant among those with waiting jobs (at its service so far,
  or the fair clock's when that is later). The index's first two entries of jobs no longer
  prioritized are dropped here as well, so the index stays near the tenant's waiting jobs
  even when no fair-share worker reads it.

  Input:
    KEYS[1] reservations  ZSET job id -> expiry ms
    KEYS[2] tenant        ZSET job id -> expiry ms, or 1 once added
    KEYS[3] sizes         HASH job id -> bytes, ':total' -> their sum (the queue's)
    KEYS[4] tenant sizes  HASH the same, for the tenant
    KEYS[5] prioritized   ZSET (BullMQ) job id -> priority * 2^32 + counter
    KEYS[6] fair jobs     ZSET the tenant's job id -> its prioritized score
    KEYS[7] fair tenants  ZSET tenant -> tokens per weight served
    KEYS[8] fair          HASH tenant -> tokens per weight served, '|clock' -> the last pick's

    ARGV[1] '1' when the jobs were added, '0' when the add failed
    ARGV[2] the tenant ('' for none)
    ARGV[3..] job ids

  Output:
    the number of reservations dropped
]]
local added = ARGV[1] == '1'
local dropped = 0
local indexed = false
for i = 3, #ARGV do
  local id = ARGV[i]
  dropped = dropped + redis.call('ZREM', KEYS[1], id)
  if added then
    redis.call('ZADD', KEYS[2], 'XX', 1, id)
    local score = redis.call('ZSCORE', KEYS[5], id)
    if score then
      redis.call('ZADD', KEYS[6], score, id)
      indexed = true
    end
  else
    redis.call('ZREM', KEYS[2], id)
    for k = 3, 4 do
      local size = redis.call('HGET', KEYS[k], id)
      if size then
        redis.call('HDEL', KEYS[k], id)
        redis.call('HINCRBY', KEYS[k], ':total', -tonumber(size))
      end
    end
  end
end
if indexed then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[6], 0, 1)) do
    if not redis.call('ZSCORE', KEYS[5], id) then
      redis.call('ZREM', KEYS[6], id)
    end
  end
  local served = redis.call('HMGET', KEYS[8], ARGV[2], '|clock')
  local at = math.max(tonumber(served[1] or '0'), tonumber(served[2] or '0'))
  redis.call('ZADD', KEYS[7], 'NX', at, ARGV[2])
end
return dropped
