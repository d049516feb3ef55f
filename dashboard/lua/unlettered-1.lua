--[[
  The failed jobs of a queue that have no dead letter, newest first: how many there are, and the
  ids of those from `start` to `stop` in that order. A dead-lettered job is shown once, under the
  dead letters; the others (stalled too often, or whose letter was purged) stay under failed.
  Reads only.

  Input:
    KEYS[1] failed  ZSET BullMQ's failed set of the queue (job id -> when it failed)
    ARGV[1] the key prefix of the dead letters' jobs (`<prefix>:{Q}:Q-dead:`)
    ARGV[2] start, from 0
    ARGV[3] stop, inclusive (-1: to the end)

  Output: { count, id... }
]]
local prefix = ARGV[1]
local start, stop = tonumber(ARGV[2]), tonumber(ARGV[3])
local count, ids = 0, {}
local total = redis.call('ZCARD', KEYS[1])
local chunk = 500
for from = 0, total - 1, chunk do
  for _, id in ipairs(redis.call('ZREVRANGE', KEYS[1], from, from + chunk - 1)) do
    if redis.call('EXISTS', prefix .. id) == 0 then
      if count >= start and (stop < 0 or count <= stop) then
        ids[#ids + 1] = id
      end
      count = count + 1
    end
  end
end
local out = { count }
for _, id in ipairs(ids) do
  out[#out + 1] = id
end
return out
