--[[
  Takes a job out of the waiting states so that no worker can start it any more, and notes it
  among the cancels under way; the caller then removes the job's data with BullMQ's own remove
  and drops the note. A cancel whose remove never came (the producer died, or this script ran
  after its caller had given up on Redis) stays noted, so a later sweep finishes it: a taken-out
  job is never left behind. A job that is active or finished is left alone. A job taken out no
  longer waits: its size leaves the depth bound's hashes (the queue's, its tenant's, read from
  its ticket).

  Input:
    KEYS[1] prioritized   ZSET (BullMQ)
    KEYS[2] wait          LIST (BullMQ)
    KEYS[3] paused        LIST (BullMQ, legacy)
    KEYS[4] delayed       ZSET (BullMQ)
    KEYS[5] cancelling    ZSET job id -> when it was taken out (ms, Redis's clock)
    KEYS[6] sizes         HASH job id -> bytes, ':total' -> their sum (the queue's)
    KEYS[7] job           HASH BullMQ's job (its options hold its ticket, with its tenant)

    ARGV[1] job id
    ARGV[2] the tenants' sizes key prefix (a tenant's hash is ARGV[2] .. tenant)

  Output:
    1  taken out (it was waiting)
    0  not waiting (active, finished, or no such job)
]]
local id = ARGV[1]
local taken = redis.call('ZREM', KEYS[1], id) == 1
  or redis.call('LREM', KEYS[2], 0, id) > 0
  or redis.call('LREM', KEYS[3], 0, id) > 0
  or redis.call('ZREM', KEYS[4], id) == 1
if not taken then
  return 0
end
local function forget(key)
  local size = redis.call('HGET', key, id)
  if size then
    redis.call('HDEL', key, id)
    redis.call('HINCRBY', key, ':total', -tonumber(size))
  end
end
forget(KEYS[6])
local ok, opts = pcall(cjson.decode, redis.call('HGET', KEYS[7], 'opts') or '{}')
if
  ok
  and type(opts) == 'table'
  and type(opts.llmq) == 'table'
  and type(opts.llmq.t) == 'string'
then
  forget(ARGV[2] .. opts.llmq.t)
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZADD', KEYS[5], now, id)
return 1
