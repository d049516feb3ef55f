--[[
  Marks a worker process present until now + ttlMs (Redis time), and drops the marks that
  lapsed (a process that died stops renewing its own).

  Input:
    KEYS[1] the queue's workers  ZSET worker id -> present until (ms, Redis time)
    ARGV[1] the worker's id
    ARGV[2] ttlMs

  Output: the number of workers present
]]
local key = KEYS[1]
local ttl = tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
redis.call('ZADD', key, now + ttl, ARGV[1])
redis.call('PEXPIRE', key, ttl)
return redis.call('ZCARD', key)
