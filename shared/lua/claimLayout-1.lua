--[[
  Registers a worker under its build's layout stamp, unless workers of another stamp are alive
  on the queue: a build whose scripts or keys differ must not run beside them. A worker's entry
  lives until its lease runs out (renewed while it runs, removed when it stops), so a dead
  worker's entry goes by itself.

  Input:
    KEYS[1] fleet  ZSET "<stamp>:<worker id>" -> lease expiry (ms, Redis's clock)

    ARGV[1] this build's layout stamp (no ':')
    ARGV[2] the worker's id
    ARGV[3] lease ms

  Output:
    {0}                           registered (or renewed)
    {1, stamp, workers, leftMs}   workers of another stamp are alive: how many, and how long
                                  until the last lease lapses if none renews; nothing written
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stamp, id, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local other, count, last = nil, 0, now
for i = 1, #members, 2 do
  local theirs = string.match(members[i], '^([^:]*):')
  if theirs ~= stamp then
    other = other or theirs
    count = count + 1
    last = math.max(last, tonumber(members[i + 1]))
  end
end
if other then return {1, other, count, last - now} end
redis.call('ZADD', KEYS[1], now + lease, stamp .. ':' .. id)
redis.call('PEXPIRE', KEYS[1], lease * 2)
return {0}
