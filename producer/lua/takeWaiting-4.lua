--[[
  Takes a job out of the waiting states so that no worker can start it any more; the caller
  then removes the job's data with BullMQ's own remove. A job that is active or finished is
  left alone. Used to cancel a job that has not started, without a race against the workers.

  Input:
    KEYS[1] prioritized   ZSET (BullMQ)
    KEYS[2] wait          LIST (BullMQ)
    KEYS[3] paused        LIST (BullMQ, legacy)
    KEYS[4] delayed       ZSET (BullMQ)

    ARGV[1] job id

  Output:
    1  taken out (it was waiting)
    0  not waiting (active, finished, or no such job)
]]
local id = ARGV[1]
if redis.call('ZREM', KEYS[1], id) == 1 then return 1 end
if redis.call('LREM', KEYS[2], 0, id) > 0 then return 1 end
if redis.call('LREM', KEYS[3], 0, id) > 0 then return 1 end
if redis.call('ZREM', KEYS[4], id) == 1 then return 1 end
return 0
