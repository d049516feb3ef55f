--[[
  Lets a finished job's request go: run right behind BullMQ's moveToFinished (in the same
  transaction for a completion), it replaces the job's data with the record a finished job
  keeps (its request's digest, model and size; see shared/job-kept.ts), once the job is in its
  finished set. A finish that BullMQ refused (lock lost), or a job it removed at once
  (removeOnComplete), is left alone.

  Input:
    KEYS[1] job       HASH BullMQ's job
    KEYS[2] finished  ZSET completed, or failed (a dead letter holds the request)
    ARGV[1] job id
    ARGV[2] the record, JSON

  Output: 1 the request was let go; 0 the job is not in the set (or gone)
]]
local jobKey, finished = KEYS[1], KEYS[2]
local id, record = ARGV[1], ARGV[2]

if not redis.call('ZSCORE', finished, id) then
  return 0
end
redis.call('HSET', jobKey, 'data', record)
return 1
