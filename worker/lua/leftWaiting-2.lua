--[[
  Forgets what was kept per waiting job for jobs that left the waiting states (a worker moved
  them to active: they hold a lock): their sizes, so that the depth bytes bound
  (producer/lua/reserveDepth-9.lua) counts only what waits, and their entries in fair share's
  index, so that it holds waiting jobs only, with fair share on or off. One entry per waiting
  job, removed as it leaves, no walk. A job given that still waits (not locked: not admitted,
  or set back) keeps its entries, so the gate may send this with every id it might take.

  Input:
    KEYS[1] sizes         HASH job id -> bytes, ':total' -> their sum (the queue's)
    KEYS[2] fair tenants  ZSET tenant -> tokens per weight served (fair share's index)
    ARGV[1] the tenants' sizes key prefix (a tenant's hash is ARGV[1] .. tenant)
    ARGV[2] the key prefix of a tenant's jobs in fair share's index (ARGV[2] .. tenant)
    ARGV[3] job key prefix (`<prefix>:<queue>:`): a job's lock is ARGV[3] .. id .. ':lock'
    ARGV[4..] job id, then its tenant ("" for none), for each job

  Output: the bytes forgotten from the queue's hash
]]
local sizes, fairTenants = KEYS[1], KEYS[2]
local tenantSizes, fairJobs, jobPrefix = ARGV[1], ARGV[2], ARGV[3]

local function forget(key, id)
  local size = redis.call('HGET', key, id)
  if not size then
    return 0
  end
  redis.call('HDEL', key, id)
  redis.call('HINCRBY', key, ':total', -tonumber(size))
  return tonumber(size)
end

-- A tenant with no waiting job left leaves the tenants' index.
local function unindex(tenant, id)
  local jobs = fairJobs .. tenant
  if redis.call('ZREM', jobs, id) == 1 and redis.call('EXISTS', jobs) == 0 then
    redis.call('ZREM', fairTenants, tenant)
  end
end

local freed = 0
for i = 4, #ARGV, 2 do
  local id, tenant = ARGV[i], ARGV[i + 1]
  if redis.call('EXISTS', jobPrefix .. id .. ':lock') == 1 then
    freed = freed + forget(sizes, id)
    if tenant ~= '' then
      forget(tenantSizes .. tenant, id)
    end
    unindex(tenant, id)
  end
end
return freed
