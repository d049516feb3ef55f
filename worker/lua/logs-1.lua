--[[
  Appends lines to the logs of many jobs at once (what BullMQ's addLog does for one), skipping
  jobs that are gone. Their keys share the queue's hash tag with KEYS[1].

  Input:
    KEYS[1] the queue's meta key (names the slot)
    ARGV[1] the queue's key prefix, `<prefix>:{queue}:<queue>:`
    ARGV[2..] job id, line, job id, line…

  Output: the number of lines written
]]
local base = ARGV[1]
local written = 0
for i = 2, #ARGV, 2 do
  local jobKey = base .. ARGV[i]
  if redis.call('EXISTS', jobKey) == 1 then
    redis.call('RPUSH', jobKey .. ':logs', ARGV[i + 1])
    written = written + 1
  end
end
return written
