--[[
  Puts jobs that came back to the prioritized set by other means than the producer's add (a
  dead letter retried) into fair share's index, so fair share finds them as it finds new ones.
  A job not in the prioritized set (taken already, or not there) is left out.

  Input:
    KEYS[1] prioritized   ZSET (BullMQ) job id -> priority * 2^32 + counter
    KEYS[2] fair tenants  ZSET tenant -> tokens per weight served
    KEYS[3] fair          HASH tenant -> tokens per weight served, '|clock' -> the last pick's
    ARGV[1] the key prefix of a tenant's jobs in the index (the tenant's name follows)
    ARGV[2..] job id, then its tenant ("" for none), for each job

  Output: how many jobs were indexed
]]
--- @include "fairIndex"

local indexed = 0
for i = 2, #ARGV, 2 do
  local id, tenant = ARGV[i], ARGV[i + 1]
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score then
    indexWaiting(ARGV[1], KEYS[2], KEYS[3], tenant, id, score)
    indexed = indexed + 1
  end
end
return indexed
