--[[
  Counts one forwarded count_tokens request against the queue's per-minute limit and the
  tenant's, or counts nothing and says which is spent: a tenant over its own share never uses
  up the others'.

  Input:
    KEYS[1] queue   STRING requests forwarded this minute (every tenant)
    KEYS[2] tenant  STRING requests forwarded this minute for the tenant

    ARGV[1] the queue's limit per minute
    ARGV[2] the tenant's limit per minute
    ARGV[3] seconds the counters live (past their minute)

  Output:
    {0}         counted: forward it
    {1, limit}  the queue's limit is spent this minute
    {2, limit}  the tenant's limit is spent this minute
]]
local queueLimit, tenantLimit, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if tonumber(redis.call('GET', KEYS[2]) or '0') >= tenantLimit then
  return { 2, tenantLimit }
end
if tonumber(redis.call('GET', KEYS[1]) or '0') >= queueLimit then
  return { 1, queueLimit }
end
for i = 1, 2 do
  redis.call('INCR', KEYS[i])
  redis.call('EXPIRE', KEYS[i], ttl)
end
return { 0 }
