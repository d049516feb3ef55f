--[[
  Drops reservations once their jobs were added (or the add failed). A tenant's member stays,
  marked as added (score 1), so the tenant's count sees the job until it leaves the waiting
  states; if the add failed, the next prune finds no waiting job and removes the member.

  Input:
    KEYS[1] reservations  ZSET job id -> expiry ms
    KEYS[2] tenant        ZSET job id -> expiry ms, or 1 once added

    ARGV[1..] job ids

  Output:
    the number of reservations dropped
]]
local dropped = 0
for i = 1, #ARGV do
  dropped = dropped + redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('ZADD', KEYS[2], 'XX', 1, ARGV[i])
end
return dropped
