--[[
  Lets a finished job's request go: run right behind BullMQ's moveToFinished (in the same
  transaction for a completion), it replaces the job's data with the record a finished job
  keeps (its request's digest, model and size; see shared/job-kept.ts), once the job is in its
  finished set. A completion's result is written here too: BullMQ's moveToFinished was given
  none (null), so that its `completed` event does not carry a second copy of it. A finish that BullMQ refused (lock lost), or a job it removed at once
  (removeOnComplete), is left alone.

  It counts what the finished job keeps (record and result) against the results' bytes bound:
  while the finished jobs hold more, the oldest go (and are counted). Jobs the queue's own
  retention (age, count) removed are forgotten as they come to the front.

  Input:
    KEYS[1] job       HASH BullMQ's job
    KEYS[2] finished  ZSET completed, or failed (a dead letter holds the request)
    KEYS[3] sizes     HASH id -> bytes a finished job keeps
    KEYS[4] order     ZSET id by when it finished (ms, Redis's clock)
    KEYS[5] bytes     HASH "*" -> the finished jobs' bytes
    KEYS[6] metrics   HASH the queue's counters
    ARGV[1] job id
    ARGV[2] the record, JSON
    ARGV[3] the bytes the job keeps (record and result)
    ARGV[4] the finished jobs' bytes bound (0: none)
    ARGV[5] the queue's key prefix (BullMQ's, ending in ":")
    ARGV[6] the result, JSON ("" for a failed job: nothing to write)

  Output: 1 the request was let go; 0 the job is not in the set (or gone)
]]
local jobKey, finished, sizes, order, bytesKey, metrics =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, record, bytes, maxBytes, prefix, result =
  ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]

if not redis.call('ZSCORE', finished, id) then
  return 0
end
if result ~= '' then
  redis.call('HSET', jobKey, 'data', record, 'returnvalue', result)
else
  redis.call('HSET', jobKey, 'data', record)
end

-- Forgets a finished job; returns the bytes it kept (0: none counted).
local function forget(job)
  redis.call('ZREM', order, job)
  local size = redis.call('HGET', sizes, job)
  if not size then
    return 0
  end
  redis.call('HDEL', sizes, job)
  return tonumber(size)
end

local time = redis.call('TIME')
local before = tonumber(redis.call('HGET', sizes, id) or '0')
redis.call('HSET', sizes, id, bytes)
redis.call('ZADD', order, tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000), id)

-- Removed by the queue's own retention: forgotten, a few at a time.
local freed = 0
for _, old in ipairs(redis.call('ZRANGE', order, 0, 1)) do
  if old ~= id and redis.call('EXISTS', prefix .. old) == 0 then
    freed = freed + forget(old)
  end
end
local total = redis.call('HINCRBY', bytesKey, '*', bytes - before - freed)

freed = 0
while maxBytes > 0 and total - freed > maxBytes do
  local oldest = redis.call('ZRANGE', order, 0, 0)[1]
  if not oldest or oldest == id then
    break
  end
  freed = freed + forget(oldest)
  if redis.call('EXISTS', prefix .. oldest) == 1 then
    redis.call('DEL', prefix .. oldest, prefix .. oldest .. ':logs')
    redis.call('ZREM', prefix .. 'completed', oldest)
    redis.call('ZREM', prefix .. 'failed', oldest)
    redis.call('HINCRBY', metrics, 'results_dropped', 1)
  end
end
if freed > 0 then
  redis.call('HINCRBY', bytesKey, '*', -freed)
end
return 1
