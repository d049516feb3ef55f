--[[
  Caps how many jobs BullMQ's moveToActive may hand out next: the gate sends its acquire, this
  ('open'), its fetches and this again ('close') in one transaction, so only the jobs the
  acquire admitted are fetched. The cap is BullMQ's own global concurrency (meta `concurrency`:
  moveToActive hands out nothing while the active list is that long); a lower one set by the
  queue's owner is left as it is. 'close' puts back what 'open' found. Nobody else sees the cap:
  it lives only inside the transaction.

  Input:
    KEYS[1] meta          HASH BullMQ's queue meta
    KEYS[2] active        LIST
    KEYS[3] reservations  HASH the limiter's: id -> reservation
    ARGV[1] 'open' | 'close'
    ARGV[2..] ('open') the ids the acquire may have admitted, in order

  Output: ('open') how many were admitted (the first k ids)
]]
local meta = KEYS[1]
if ARGV[1] == 'close' then
  local was = redis.call('HGET', meta, 'llmq:cap')
  if not was then
    return 0
  end
  if was == '' then
    redis.call('HDEL', meta, 'concurrency')
  else
    redis.call('HSET', meta, 'concurrency', was)
  end
  redis.call('HDEL', meta, 'llmq:cap')
  return 0
end
-- The ids follow the op: ARGV[2] is the first.
local admitted = 0
while admitted + 2 <= #ARGV and redis.call('HEXISTS', KEYS[3], ARGV[admitted + 2]) == 1 do
  admitted = admitted + 1
end
local cap = redis.call('LLEN', KEYS[2]) + admitted
local was = redis.call('HGET', meta, 'concurrency')
if was and tonumber(was) <= cap then
  return admitted
end
redis.call('HSET', meta, 'concurrency', cap, 'llmq:cap', was or '')
return admitted
