--[[
  Drops reservations once their jobs were added (or the add failed). After an add, a tenant's
  member stays, marked as added (score 1), and so do the jobs' sizes, so the bounds see the job
  until it leaves the waiting states. After a failed add the members and sizes go too: nothing
  of a job that does not exist is left behind.

  Input:
    KEYS[1] reservations  ZSET job id -> expiry ms
    KEYS[2] tenant        ZSET job id -> expiry ms, or 1 once added
    KEYS[3] sizes         HASH job id -> bytes, ':total' -> their sum (the queue's)
    KEYS[4] tenant sizes  HASH the same, for the tenant

    ARGV[1] '1' when the jobs were added, '0' when the add failed
    ARGV[2..] job ids

  Output:
    the number of reservations dropped
]]
local added = ARGV[1] == '1'
local dropped = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  dropped = dropped + redis.call('ZREM', KEYS[1], id)
  if added then
    redis.call('ZADD', KEYS[2], 'XX', 1, id)
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
return dropped
