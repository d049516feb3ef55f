--[[
  Reserves room for jobs about to be added, or reserves nothing and says why. Keeps the
  queue's depth bound (and a tenant's), in jobs and in bytes, under any number of producers in
  any number of processes: the count and the reservation happen in one step, and a reservation
  expires by itself, so a producer that crashes between reserve and add leaks nothing.

  "Waiting" means not started and not finished: wait + paused + prioritized + delayed (a
  retry in backoff comes back), plus the live reservations of producers that are adding right
  now. A job counts twice between its add and the release of its reservation: the bound errs
  on the safe side.

  A tenant's set holds its job ids: score = reservation expiry while adding, 1 once added. It is
  pruned only when it looks full: members whose reservation lapsed and whose job is no longer
  waiting (started, finished, cancelled) leave; so the count is exact at the bound and
  conservative below it. The sizes hashes (the queue's, a tenant's) hold job id -> the bytes of
  its data, and the field ':total' (no job id holds a ':') their sum; kept only while a bytes
  bound is set. An entry leaves as its job leaves waiting (the worker's leftWaiting-2.lua, a
  cancel's takeWaiting-7.lua), so no walk is needed; one that stayed behind (a job removed by
  other means) is swept by a walk when the hash looks full and holds more entries than jobs
  wait, or at most once a minute (':pruned', Redis time of the last). A tenant's bytes bound counts its dead letters too
  (`dead bytes`, kept by the worker: worker/lua/keepDead-5.lua): all its jobs keep.

  Input:
    KEYS[1] prioritized   ZSET (BullMQ)
    KEYS[2] wait          LIST (BullMQ)
    KEYS[3] paused        LIST (BullMQ, legacy)
    KEYS[4] delayed       ZSET (BullMQ)
    KEYS[5] reservations  ZSET job id -> expiry ms
    KEYS[6] tenant        ZSET job id -> expiry ms, or 1 once added
    KEYS[7] sizes         HASH job id -> bytes, ':total' -> their sum (the queue's)
    KEYS[8] tenant sizes  HASH the same, for the tenant
    KEYS[9] dead bytes    HASH "t:<tenant>" -> the bytes of a tenant's dead letters

    ARGV[1] queue bound, 0 for none
    ARGV[2] tenant bound, 0 for none (the tenant set is then not kept)
    ARGV[3] reservation ttl ms
    ARGV[4] job key prefix (`<prefix>:{q}:<queue>:`), to see which ids exist already
    ARGV[5] queue bound in bytes, 0 for none (the sizes hash is then not kept)
    ARGV[6] tenant bound in bytes, 0 for none
    ARGV[7] the tenant ("" for none)
    ARGV[8..] job id, then its bytes, for each job

  Output:
    {0, flags}          reserved; flags has one character per id: '1' the job exists already
                        (nothing reserved for it), '0' reserved
    {1, depth, bound}   the queue is full; nothing reserved
    {2, depth, bound}   the tenant is full; nothing reserved
    {3, id}             another producer is adding that id right now; nothing reserved
    {4, bytes, bound}   the queue's bytes are full; nothing reserved
    {5, bytes, bound, dead}  the tenant's bytes (waiting, and its dead letters') are full;
                        nothing reserved
    {6, bytes, bound}   the jobs' bytes are more than the queue's bound: they never fit
    {7, bytes, bound}   the jobs' bytes are more than the tenant's bound: they never fit
]]
local rcall = redis.call
local prioritizedKey, waitKey, pausedKey, delayedKey, resKey, tenantKey, sizesKey, tenantSizesKey =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local deadBytesKey = KEYS[9]
local bound = tonumber(ARGV[1])
local tenantBound = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local jobPrefix = ARGV[4]
local bytesBound = tonumber(ARGV[5])
local tenantBytesBound = tonumber(ARGV[6])
local tenant = ARGV[7]

local t = rcall('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

rcall('ZREMRANGEBYSCORE', resKey, '-inf', now)

local flags = {}
local fresh = {}
local freshSizes = {}
local freshBytes = 0
for i = 8, #ARGV, 2 do
  local id = ARGV[i]
  if rcall('EXISTS', jobPrefix .. id) == 1 then
    flags[#flags + 1] = '1'
  elseif rcall('ZSCORE', resKey, id) then
    return { 3, id }
  else
    flags[#flags + 1] = '0'
    fresh[#fresh + 1] = id
    freshSizes[#freshSizes + 1] = tonumber(ARGV[i + 1])
    freshBytes = freshBytes + tonumber(ARGV[i + 1])
  end
end
local n = #fresh

if n > 0 and bound > 0 then
  local depth = rcall('ZCARD', prioritizedKey)
    + rcall('LLEN', waitKey)
    + rcall('LLEN', pausedKey)
    + rcall('ZCARD', delayedKey)
    + rcall('ZCARD', resKey)
  if depth + n > bound then
    return { 1, depth, bound }
  end
end

local function isWaiting(id)
  if rcall('ZSCORE', prioritizedKey, id) or rcall('ZSCORE', delayedKey, id) then
    return true
  end
  if rcall('LLEN', waitKey) > 0 and rcall('LPOS', waitKey, id) then
    return true
  end
  if rcall('LLEN', pausedKey) > 0 and rcall('LPOS', pausedKey, id) then
    return true
  end
  return false
end

if n > 0 and tenantBound > 0 then
  local count = rcall('ZCARD', tenantKey)
  if count + n > tenantBound then
    local members = rcall('ZRANGE', tenantKey, 0, -1, 'WITHSCORES')
    for i = 1, #members, 2 do
      local id, score = members[i], tonumber(members[i + 1])
      if score <= now and not isWaiting(id) then
        rcall('ZREM', tenantKey, id)
        count = count - 1
      end
    end
    if count + n > tenantBound then
      return { 2, count, tenantBound }
    end
  end
end

-- The bytes of a sizes hash once the jobs that no longer wait (and hold no reservation) left.
local function prunedTotal(key)
  local all = rcall('HGETALL', key)
  local total = 0
  for i = 1, #all, 2 do
    local id, size = all[i], tonumber(all[i + 1])
    if id ~= ':total' and id ~= ':pruned' then
      if rcall('ZSCORE', resKey, id) or isWaiting(id) then
        total = total + size
      else
        rcall('HDEL', key, id)
      end
    end
  end
  rcall('HSET', key, ':total', total, ':pruned', now)
  return total
end

-- Entries leave as their jobs leave waiting: a walk only when the queue's hash holds more
-- entries than jobs wait (some job was removed by other means), or at most once a minute.
local function prunable(key)
  local entries = rcall('HLEN', sizesKey)
    - rcall('HEXISTS', sizesKey, ':total')
    - rcall('HEXISTS', sizesKey, ':pruned')
  local waiting = rcall('ZCARD', prioritizedKey)
    + rcall('LLEN', waitKey)
    + rcall('LLEN', pausedKey)
    + rcall('ZCARD', delayedKey)
    + rcall('ZCARD', resKey)
  return entries > waiting or now - tonumber(rcall('HGET', key, ':pruned') or '0') > 60000
end

-- `dead`: bytes held beside the waiting ones (a tenant's dead letters).
local function bytesFull(key, limit, fullCode, neverCode, dead)
  if freshBytes == 0 or limit <= 0 then
    return nil
  end
  if freshBytes > limit then
    return { neverCode, freshBytes, limit }
  end
  local total = tonumber(rcall('HGET', key, ':total') or '0')
  if total + dead + freshBytes > limit and prunable(key) then
    total = prunedTotal(key)
  end
  if total + dead + freshBytes > limit then
    return { fullCode, total, limit, dead }
  end
  return nil
end

local tenantDead = 0
if tenant ~= '' then
  tenantDead = tonumber(rcall('HGET', deadBytesKey, 't:' .. tenant) or '0')
end
local full = bytesFull(sizesKey, bytesBound, 4, 6, 0)
  or bytesFull(tenantSizesKey, tenantBytesBound, 5, 7, tenantDead)
if full then
  return full
end

-- A job id may come back (a key's job was removed): its old size is replaced, not added to.
local function addSize(key, id, size)
  local old = tonumber(rcall('HGET', key, id) or '0')
  rcall('HSET', key, id, size)
  rcall('HINCRBY', key, ':total', size - old)
end

if n > 0 then
  local expiry = now + ttl
  for i = 1, n do
    rcall('ZADD', resKey, expiry, fresh[i])
    if tenantBound > 0 then
      rcall('ZADD', tenantKey, expiry, fresh[i])
    end
    if bytesBound > 0 then
      addSize(sizesKey, fresh[i], freshSizes[i])
    end
    if tenantBytesBound > 0 then
      addSize(tenantSizesKey, fresh[i], freshSizes[i])
    end
  end
  rcall('PEXPIRE', resKey, ttl * 2)
end
return { 0, table.concat(flags) }
