--[[
  Forgets the sizes of jobs that left the waiting states (a worker moved them to active), so
  that the depth bytes bound (producer/lua/reserveDepth-9.lua) counts only what waits: one
  entry per waiting job, removed as it leaves, no walk of the hash.

  Input:
    KEYS[1] sizes  HASH job id -> bytes, ':total' -> their sum (the queue's)
    ARGV[1] the tenants' sizes key prefix (a tenant's hash is ARGV[1] .. tenant)
    ARGV[2..] job id, then its tenant ("" for none), for each job

  Output: the bytes forgotten from the queue's hash
]]
local sizes, tenantSizes = KEYS[1], ARGV[1]

local function forget(key, id)
  local size = redis.call('HGET', key, id)
  if not size then
    return 0
  end
  redis.call('HDEL', key, id)
  redis.call('HINCRBY', key, ':total', -tonumber(size))
  return tonumber(size)
end

local freed = 0
for i = 2, #ARGV, 2 do
  local id, tenant = ARGV[i], ARGV[i + 1]
  freed = freed + forget(sizes, id)
  if tenant ~= '' then
    forget(tenantSizes .. tenant, id)
  end
end
return freed
