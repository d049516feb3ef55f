--[[
  Registers a worker under its build's layout stamp, unless the queue is another build's: workers
  of another stamp are alive on it, or workers of a build from before the stamp (present on the
  queue, with no stamp), or it holds jobs of a newer format than this build reads. A worker's
  entry lives until its lease runs out (renewed while it runs, removed when it stops), so a dead
  worker's entry goes by itself. The queue's stamp keeps the newest job format written to it
  and the build that last registered.

  Input:
    KEYS[1] fleet    ZSET "<stamp>:<worker id>" -> lease expiry (ms, Redis's clock)
    KEYS[2] workers  ZSET worker id -> presence expiry (ms), written by every build since presence
    KEYS[3] stamp    HASH format (newest job format written), layout, version

    ARGV[1] this build's layout stamp (no ':')
    ARGV[2] the worker's id
    ARGV[3] lease ms
    ARGV[4] the newest job format this build reads
    ARGV[5] this build's version
    ARGV[6] "renew": only renew the entry (the checks ran when the worker started)

  Output:
    {0}                           registered (or renewed)
    {1, stamp, workers, leftMs}   workers of another stamp are alive: how many, and how long
                                  until the last lease lapses if none renews; nothing written
    {2, workers, leftMs}          workers with no stamp are alive (an older build)
    {3, format}                   the queue holds jobs of a newer format
]]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local stamp, id, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local readsFormat = tonumber(ARGV[4])

if ARGV[6] == 'renew' then
  redis.call('ZADD', KEYS[1], now + lease, stamp .. ':' .. id)
  redis.call('PEXPIRE', KEYS[1], lease * 2)
  return { 0 }
end

local written = tonumber(redis.call('HGET', KEYS[3], 'format') or '0')
if written > readsFormat then
  return { 3, written }
end

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local other, count, last = nil, 0, now
local stamped = {}
for i = 1, #members, 2 do
  local theirs, worker = string.match(members[i], '^([^:]*):(.*)$')
  stamped[worker] = true
  if theirs ~= stamp then
    other = other or theirs
    count = count + 1
    last = math.max(last, tonumber(members[i + 1]))
  end
end
if other then
  return { 1, other, count, last - now }
end

local present = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES')
local unstamped, lastSeen = 0, now
for i = 1, #present, 2 do
  if present[i] ~= id and not stamped[present[i]] then
    unstamped = unstamped + 1
    lastSeen = math.max(lastSeen, tonumber(present[i + 1]))
  end
end
if unstamped > 0 then
  return { 2, unstamped, lastSeen - now }
end

redis.call('ZADD', KEYS[1], now + lease, stamp .. ':' .. id)
redis.call('PEXPIRE', KEYS[1], lease * 2)
redis.call('HSET', KEYS[3], 'layout', stamp, 'version', ARGV[5])
return { 0 }
