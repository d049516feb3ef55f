--[[
  Fair share's index (docs/limiter.md "Fair share's index"): a tenant's waiting jobs by BullMQ's
  prioritized score (`jobsPrefix` .. tenant), and the tenants with waiting jobs by tokens per
  weight served (`tenants`), a tenant coming in at its service so far or the fair clock's
  (`served`: HASH tenant -> service, '|clock'), whichever is later. The producer's add indexes
  its jobs the same way (producer/lua/releaseDepth-8.lua).
]]

-- Indexes a job that waits (or is about to, in the prioritized set at `score`).
local function indexWaiting(jobsPrefix, tenants, served, tenant, id, score)
  redis.call('ZADD', jobsPrefix .. tenant, score, id)
  local s = redis.call('HMGET', served, tenant, '|clock')
  local at = math.max(tonumber(s[1] or '0'), tonumber(s[2] or '0'))
  redis.call('ZADD', tenants, 'NX', at, tenant)
end

-- The tenant of a job from its options as BullMQ stores them: its llmq ticket's ('' for none);
-- nil when the job carries no ticket (not llmq's: the index does not hold it).
local function ticketTenant(opts)
  local ok, o = pcall(cjson.decode, opts or '')
  if not ok or type(o) ~= 'table' or type(o.llmq) ~= 'table' then
    return nil
  end
  return type(o.llmq.t) == 'string' and o.llmq.t or ''
end
