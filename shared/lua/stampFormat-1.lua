--[[
  Stamps a queue with the newest job format written to it, and the version of the build that
  wrote it: a worker that reads only older formats refuses the queue (claimLayout).

  Input:
    KEYS[1] stamp  HASH format (newest job format written), layout, version, producer_version
    ARGV[1] the job format this build writes
    ARGV[2] this build's version

  Output: the queue's newest format now
]]
local format = tonumber(ARGV[1])
local written = tonumber(redis.call('HGET', KEYS[1], 'format') or '0')
if format > written then
  redis.call('HSET', KEYS[1], 'format', format)
  written = format
end
redis.call('HSET', KEYS[1], 'producer_version', ARGV[2])
return written
