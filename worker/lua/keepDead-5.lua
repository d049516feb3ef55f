--[[
  Counts a dead letter just added, then drops the oldest letters while a bound is passed: older
  than the age bound, the queue's letters over its bytes bound, the letter's tenant's letters
  over theirs. A letter over a bytes bound on its own is dropped alone. Each drop deletes the
  letter (its BullMQ job) and is counted in the queue's metrics.

  Input:
    KEYS[1] sizes    HASH id -> "bytes|tenant"
    KEYS[2] order    ZSET id by when it was kept (ms, Redis's clock)
    KEYS[3] bytes    HASH "*" -> the queue's bytes, "t:<tenant>" -> a tenant's
    KEYS[4] wait     LIST the dead-letter queue's (BullMQ's) wait list
    KEYS[5] metrics  HASH the queue's counters
    ARGV[1] the dead-letter queue's job key prefix (BullMQ's, ending in ":")
    ARGV[2] the tenants' order key prefix
    ARGV[3] letter id
    ARGV[4] its bytes
    ARGV[5] its tenant ("" for none)
    ARGV[6] age bound, ms (0: none)
    ARGV[7] the queue's bytes bound (0: none)
    ARGV[8] a tenant's bytes bound (0: none)
    ARGV[9] now, ms ("" for Redis's clock; a test's injected clock otherwise)

  Output: the ids of the letters dropped
]]
--- @include "deadBytes"

local sizes, order, bytesKey, wait, metrics = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local letterPrefix, tenantOrders = ARGV[1], ARGV[2]
local id, bytes, tenant = ARGV[3], tonumber(ARGV[4]), ARGV[5]
local maxAgeMs, maxBytes, tenantMaxBytes = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])

local now = tonumber(ARGV[9])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local dropped = {}

local function drop(letter, from)
  local freed = forgetDead(sizes, order, bytesKey, tenantOrders, letter) or 0
  redis.call('ZREM', from, letter)
  redis.call('DEL', letterPrefix .. letter, letterPrefix .. letter .. ':logs')
  redis.call('LREM', wait, 0, letter)
  redis.call('HINCRBY', metrics, 'dead_letters_dropped', 1)
  redis.call('HINCRBY', metrics, 'dead_letter_bytes_dropped', freed)
  dropped[#dropped + 1] = letter
end

-- Drops the oldest letters of `from` while `field`'s bytes are over `bound`.
local function dropOldest(from, field, bound)
  while bound > 0 and tonumber(redis.call('HGET', bytesKey, field) or '0') > bound do
    local oldest = redis.call('ZRANGE', from, 0, 0)[1]
    if not oldest then
      break
    end
    drop(oldest, from)
  end
end

-- Kept again under its id (retried, then dead again): counted once.
forgetDead(sizes, order, bytesKey, tenantOrders, id)
redis.call('HSET', sizes, id, bytes .. '|' .. tenant)
redis.call('ZADD', order, now, id)
redis.call('HINCRBY', bytesKey, '*', bytes)
if tenant ~= '' then
  redis.call('ZADD', tenantOrders .. tenant, now, id)
  redis.call('HINCRBY', bytesKey, 't:' .. tenant, bytes)
end

if
  (maxBytes > 0 and bytes > maxBytes)
  or (tenant ~= '' and tenantMaxBytes > 0 and bytes > tenantMaxBytes)
then
  drop(id, order)
  return dropped
end

if maxAgeMs > 0 then
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', order, '-inf', now - maxAgeMs, 'LIMIT', 0, 100)) do
    drop(old, order)
  end
end
dropOldest(order, '*', maxBytes)
if tenant ~= '' then
  dropOldest(tenantOrders .. tenant, 't:' .. tenant, tenantMaxBytes)
end
return dropped
