--[[
  Peeks at the jobs BullMQ's moveToActive would hand out next, without taking them. moveToActive
  first promotes the due delayed jobs (in the delayed set's order: those without a priority to
  the far end of the wait list, the others into the prioritized set behind the jobs of their
  priority, each with the next value of the priority counter), then takes the wait list's tail,
  then the prioritized set's lowest score. This works out that same order. A paused queue, or
  one at its global concurrency, has no head.

  Input:
    KEYS[1] wait         LIST
    KEYS[2] prioritized  ZSET priority * 2^32 + counter
    KEYS[3] delayed      ZSET due ms * 2^12 + counter
    KEYS[4] meta         HASH paused, concurrency
    KEYS[5] active       LIST
    KEYS[6] pc           STRING the priority counter
    KEYS[7] fair tenants ZSET tenant -> tokens per weight served (fair share's index)
    KEYS[8] fair         HASH tenant -> tokens per weight served, '|clock' -> the last pick's
    ARGV[1] job key prefix (`<prefix>:<queue>:`), in the same hash tag
    ARGV[2] the highest delayed score that is due now
    ARGV[3] how many due delayed jobs to look at
    ARGV[4] how many jobs to give at most (with ARGV[5], how many to look at)
    ARGV[5] "tenants": give only the first ARGV[6] jobs of each tenant, of the first job's
            priority (fair share: the gate orders tenants; their jobs keep their order), and
            besides BullMQ's first few, the first jobs of the ARGV[8] tenants furthest behind,
            from fair share's index (never a scan of the queue)
    ARGV[6] with "tenants", how many of each tenant's jobs (default 1)
    ARGV[7] the key prefix of a tenant's jobs in fair share's index (ZSET job id -> BullMQ's
            prioritized score; the tenant's name follows)
    ARGV[8] with "tenants", how many tenants to read from the index

  Output: {jobId, opts JSON, data JSON or '', ...} in the order BullMQ hands them out, or false
  when there is nothing to hand out. With "tenants", the index's jobs follow BullMQ's first
  few, by their score; index entries of jobs no longer in the prioritized set (nor due to come
  back from the delayed set) are dropped as they are read, and a tenant with none left leaves
  the index. The due delayed jobs with a priority (a retry, a job set back) go into the index
  with the score their promotion will give them, with fair share on or off: the index holds
  every waiting job, not only those the producer added. The data comes only for a job
  whose options carry no llmq ticket (a format-1 job, or one added by other means). With
  "tenants", the tenant is the ticket's (the index's, for its jobs) and the priority BullMQ's
  own: never searched for in the request's JSON. When more
  delayed jobs are due than it looks at, only the first job is given (what the others would do
  to the order is unknown).
]]
--- @include "fairIndex"

local SHIFT = 4294967296
-- With "tenants", how many of BullMQ's own first jobs are given before the index's.
local FAIR_HEADS = 4
local want = tonumber(ARGV[4] or '1')
local meta = redis.call('HMGET', KEYS[4], 'paused', 'concurrency')
if meta[1] then
  return false
end
if meta[2] then
  want = math.min(want, tonumber(meta[2]) - redis.call('LLEN', KEYS[5]))
  if want < 1 then
    return false
  end
end
local scan = tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[3], 0, ARGV[2], 'LIMIT', 0, scan)
if #due >= scan then
  want = 1
end

-- The wait list hands out from its tail; due jobs without a priority come after it.
local heads = {}
local ids = redis.call('LRANGE', KEYS[1], 0 - want, -1)
for i = #ids, 1, -1 do
  heads[#heads + 1] = ids[i]
end

-- The prioritized set as it will be once the due jobs are promoted: theirs, with the counters
-- they will get, merged with the lowest scores already there.
local promoted = {}
local pc = tonumber(redis.call('GET', KEYS[6]) or '0')
for _, d in ipairs(due) do
  local job = redis.call('HMGET', ARGV[1] .. d, 'priority', 'opts')
  local p = tonumber(job[1] or '0')
  if p == 0 then
    heads[#heads + 1] = d
  else
    pc = pc + 1
    local score = p * SHIFT + pc % SHIFT
    promoted[#promoted + 1] = { d, score }
    local tenant = ticketTenant(job[2])
    if tenant then
      indexWaiting(ARGV[7], KEYS[7], KEYS[8], tenant, d, score)
    end
  end
end
if #heads < want then
  local top = redis.call('ZRANGE', KEYS[2], 0, want - #heads - 1, 'WITHSCORES')
  local i, j = 1, 1
  while #heads < want and (i <= #top or j <= #promoted) do
    local a = top[i] and tonumber(top[i + 1])
    local b = promoted[j] and promoted[j][2]
    if a and (not b or a <= b) then
      heads[#heads + 1] = top[i]
      i = i + 2
    else
      heads[#heads + 1] = promoted[j][1]
      j = j + 1
    end
  end
end

-- Fair share: BullMQ's first few, then the first jobs of the tenants furthest behind (BullMQ's
-- cover jobs the index does not hold: added by an older build, stalled, promoted from delayed).
local perTenant = ARGV[5] == 'tenants'
local bullmq = math.min(#heads, want, perTenant and FAIR_HEADS or want)
for k = #heads, bullmq + 1, -1 do
  heads[k] = nil
end
local tenantOf = {}
if perTenant and #due < scan then
  local inHeads = {}
  for _, id in ipairs(heads) do
    inHeads[id] = true
  end
  local tenants = redis.call('ZRANGE', KEYS[7], 0, tonumber(ARGV[8]) - 1)
  -- Up to `want` jobs of the tenant furthest behind, fewer of the next (at least one each):
  -- about the jobs wanted and one per tenant in all. Entries of jobs gone are dropped (a
  -- bounded number).
  local budget = want + #tenants
  local reads, maxReads = 0, budget + 4 * want + 64
  local extra = {}
  for n, t in ipairs(tenants) do
    local key = ARGV[7] .. t
    local per = math.min(want, math.max(1, budget - (#tenants - n)))
    local got, from = 0, 0
    while got < per and reads < maxReads do
      local ids = redis.call('ZRANGE', key, from, from + per - got - 1)
      if #ids == 0 then
        break
      end
      for _, id in ipairs(ids) do
        reads = reads + 1
        local score = redis.call('ZSCORE', KEYS[2], id)
        if score then
          from, got = from + 1, got + 1
          if not inHeads[id] then
            extra[#extra + 1] = { id, tonumber(score) }
            tenantOf[id] = t
          end
        elseif redis.call('ZSCORE', KEYS[3], id) then
          -- Due to come back (indexed above): the next take promotes it.
          from = from + 1
        else
          redis.call('ZREM', key, id)
        end
      end
    end
    budget = budget - got
    if got == 0 and redis.call('EXISTS', key) == 0 then
      redis.call('ZREM', KEYS[7], t)
    end
  end
  table.sort(extra, function(a, b)
    return a[2] < b[2]
  end)
  for _, e in ipairs(extra) do
    heads[#heads + 1] = e[1]
  end
end

local out = {}
local each = tonumber(ARGV[6] or '1')
local seen, firstPriority = {}, nil
for k = 1, #heads do
  local id = heads[k]
  local fromIndex = k > bullmq
  local job = redis.call('HMGET', ARGV[1] .. id, 'opts', 'priority')
  -- A job whose hash is gone ends BullMQ's list: BullMQ would stumble on it first.
  if not job[1] and not fromIndex then
    break
  end
  local ticket = nil
  if fromIndex then
    -- Added by llmq's producer, under the index's tenant: no need to decode its options.
    ticket = job[1] and string.find(job[1], '"llmq":{', 1, true) and { t = tenantOf[id] }
  elseif job[1] then
    local ok, opts = pcall(cjson.decode, job[1])
    if ok and type(opts) == 'table' and type(opts.llmq) == 'table' then
      ticket = opts.llmq
    end
  end
  local keep = job[1] and true or false
  if perTenant and keep then
    local priority = job[2] or '0'
    if firstPriority == nil then
      firstPriority = priority
    end
    -- BullMQ's list ends at another priority; the index's jobs of another one are skipped.
    if priority ~= firstPriority and not fromIndex then
      break
    end
    local tenant = ticket and type(ticket.t) == 'string' and ticket.t or ''
    local n = (seen[tenant] or 0) + 1
    keep = n <= each and priority == firstPriority
    if keep then
      seen[tenant] = n
    end
  end
  if keep then
    out[#out + 1] = id
    out[#out + 1] = job[1]
    out[#out + 1] = ticket and '' or (redis.call('HGET', ARGV[1] .. id, 'data') or '')
  end
end
if #out == 0 then
  return false
end
return out
