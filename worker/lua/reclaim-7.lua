--[[
  Takes a job's lock back for a worker whose lock lapsed while its call ran (the process was
  stopped, or its event loop stalled, past the lock), so that the completion queued behind this
  script in the same transaction (BullMQ's moveToFinished) stores its result: when no other
  worker took the job. It is still active with no lock (the stalled check has not run), or
  back in wait, prioritized or delayed (the stalled check moved it; nobody fetched it since): it
  goes to active, locked with this worker's token, as BullMQ's moveToActive would leave it.
  Held by another token, finished or gone: left alone, and moveToFinished then refuses.

  Input:
    KEYS[1] job          HASH BullMQ's job
    KEYS[2] lock         STRING the job's lock (its token)
    KEYS[3] active       LIST
    KEYS[4] wait         LIST
    KEYS[5] prioritized  ZSET
    KEYS[6] delayed      ZSET
    KEYS[7] events       STREAM
    ARGV[1] job id
    ARGV[2] token
    ARGV[3] lock duration, ms

  Output: 1 the lock is the token's; 0 the job is finished or gone; the holder's token when
    another holds the lock
]]
local jobKey, lockKey, active = KEYS[1], KEYS[2], KEYS[3]
local id, token = ARGV[1], ARGV[2]

local holder = redis.call('GET', lockKey)
if holder == token then
  return 1
end
if holder then
  return holder
end
if redis.call('EXISTS', jobKey) == 0 or redis.call('HEXISTS', jobKey, 'finishedOn') == 1 then
  return 0
end

if not redis.call('LPOS', active, id) then
  local waiting = redis.call('LREM', KEYS[4], 1, id) == 1
    or redis.call('ZREM', KEYS[5], id) == 1
    or redis.call('ZREM', KEYS[6], id) == 1
  if not waiting then
    return 0
  end
  redis.call('LPUSH', active, id)
  redis.call('XADD', KEYS[7], '*', 'event', 'active', 'jobId', id, 'prev', 'waiting')
end
redis.call('SET', lockKey, token, 'PX', tonumber(ARGV[3]))
return 1
