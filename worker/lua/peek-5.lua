--[[
  Peeks at the job BullMQ's moveToActive would hand out next, without taking it: due delayed
  jobs first (promoted behind the waiting jobs of their priority, so only a more urgent one goes
  ahead), then the plain wait list, then the prioritized set. A paused queue, or one at its
  global concurrency, has no head.

  Input:
    KEYS[1] wait         LIST
    KEYS[2] prioritized  ZSET priority * 2^32 + counter
    KEYS[3] delayed      ZSET due ms * 2^12 + counter
    KEYS[4] meta         HASH paused, concurrency
    KEYS[5] active       LIST
    ARGV[1] job key prefix (`<prefix>:<queue>:`), in the same hash tag
    ARGV[2] the highest delayed score that is due now
    ARGV[3] how many due delayed jobs to look at

  Output: {jobId, data JSON} or false when there is nothing to hand out
]]
local meta = redis.call('HMGET', KEYS[4], 'paused', 'concurrency')
if meta[1] then return false end
if meta[2] and redis.call('LLEN', KEYS[5]) >= tonumber(meta[2]) then return false end

local id = redis.call('LINDEX', KEYS[1], -1)
if not id then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  id = head[1]
  local best = math.huge
  if head[2] then best = math.floor(tonumber(head[2]) / 4294967296) end
  local due = redis.call('ZRANGEBYSCORE', KEYS[3], 0, ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
  for _, d in ipairs(due) do
    local p = tonumber(redis.call('HGET', ARGV[1] .. d, 'priority') or '0')
    if p < best then
      best = p
      id = d
    end
  end
end
if not id then return false end
local data = redis.call('HGET', ARGV[1] .. id, 'data')
if not data then return false end
return { id, data }
