--[[
  Peeks at the jobs BullMQ's moveToActive would hand out next, without taking them: the plain
  wait list first, then the prioritized set, where due delayed jobs are promoted behind the
  waiting jobs of their priority (so only a more urgent one goes ahead). A paused queue, or one
  at its global concurrency, has no head. When a due delayed job could go ahead, only the first
  job is given: what comes after it depends on the promotion.

  Input:
    KEYS[1] wait         LIST
    KEYS[2] prioritized  ZSET priority * 2^32 + counter
    KEYS[3] delayed      ZSET due ms * 2^12 + counter
    KEYS[4] meta         HASH paused, concurrency
    KEYS[5] active       LIST
    ARGV[1] job key prefix (`<prefix>:<queue>:`), in the same hash tag
    ARGV[2] the highest delayed score that is due now
    ARGV[3] how many due delayed jobs to look at
    ARGV[4] how many jobs to give at most

  Output: {jobId, data JSON, jobId, data JSON, ...} in the order BullMQ hands them out, or false
  when there is nothing to hand out
]]
local want = tonumber(ARGV[4] or '1')
local meta = redis.call('HMGET', KEYS[4], 'paused', 'concurrency')
if meta[1] then return false end
if meta[2] then
  want = math.min(want, tonumber(meta[2]) - redis.call('LLEN', KEYS[5]))
  if want < 1 then return false end
end

-- The wait list hands out from its tail.
local ids = redis.call('LRANGE', KEYS[1], 0 - want, -1)
local heads = {}
for i = #ids, 1, -1 do heads[#heads + 1] = ids[i] end

if #heads < want then
  local rest = want - #heads
  local due = redis.call('ZRANGEBYSCORE', KEYS[3], 0, ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
  if #due > 0 then
    -- Promotion reorders: give only the one job that goes first, and only if nothing is ahead.
    if #heads > 0 then rest = 0 else rest = 1 end
  end
  if rest > 0 then
    local top = redis.call('ZRANGE', KEYS[2], 0, rest - 1, 'WITHSCORES')
    local id = top[1]
    local best = math.huge
    if top[2] then best = math.floor(tonumber(top[2]) / 4294967296) end
    local delayedFirst = false
    for _, d in ipairs(due) do
      local p = tonumber(redis.call('HGET', ARGV[1] .. d, 'priority') or '0')
      if p < best then
        best = p
        id = d
        delayedFirst = true
      end
    end
    if delayedFirst or #due > 0 then
      if id then heads[#heads + 1] = id end
    else
      for i = 1, #top, 2 do heads[#heads + 1] = top[i] end
    end
  end
end

local out = {}
for _, id in ipairs(heads) do
  local data = redis.call('HGET', ARGV[1] .. id, 'data')
  -- A job whose hash is gone ends the list: BullMQ would stumble on it first.
  if not data then break end
  out[#out + 1] = id
  out[#out + 1] = data
end
if #out == 0 then return false end
return out
