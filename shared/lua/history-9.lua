--[[
  Adds what a worker's calls and counters did to the queue's usage history (shared/history.ts):
  each series' fields to the current bucket of every tier (a ring of slots: a slot holding an
  older bucket starts afresh; fields add up, but `wn` `ln` keep the least value and `wx` `lx`
  the greatest), the backlog to the fleet's (`q` as last seen, `qx` the most), and tenants' finished jobs to
  their lists (each list read and written once a call). Tenants and models past the caps count
  as `t:(other)` / `m:(other)`. Every key expires one range after its last write, so a queue
  nobody uses keeps nothing. The writer splits a flush into calls of a bounded number of
  tenants (shared/history.ts), so no call's work grows with the tenants.

  Input:
    KEYS[1] tier 0        HASH "<series>|<slot>" -> "<bucket start>;k=v;..." (10 s buckets)
    KEYS[2] tier 1        HASH the same, 1 min buckets
    KEYS[3] tier 2        HASH the same, 10 min buckets
    KEYS[4] tenants       SET  tenant series kept by name
    KEYS[5] models        SET  model series kept by name
    KEYS[6] jobs          HASH tenant series -> JSON list of its latest jobs, newest first
    KEYS[7] wait          LIST BullMQ's wait list of the queue       (read: the backlog)
    KEYS[8] prioritized   ZSET BullMQ's prioritized set of the queue (read)
    KEYS[9] delayed       ZSET BullMQ's delayed set of the queue     (read)
    ARGV[1] JSON: now (ms; absent: TIME), series { name -> { field -> n } }, jobs (pairs of
      tenant and job), tiers (pairs of bucketMs and slots, three), maxTenants, maxModels, keepJobs

  Output: 1
]]
local a = cjson.decode(ARGV[1])
local now = a.now
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function decode(s)
  local at, t = nil, {}
  if not s then
    return nil, t
  end
  for tok in string.gmatch(s, '[^;]+') do
    if not at then
      at = tonumber(tok)
    else
      local k, v = string.match(tok, '^(%w+)=(%-?%d+)$')
      if k then
        t[k] = tonumber(v)
      end
    end
  end
  return at, t
end

local function encode(at, t)
  local parts = { string.format('%d', at) }
  for k, v in pairs(t) do
    parts[#parts + 1] = k .. '=' .. string.format('%d', v)
  end
  return table.concat(parts, ';')
end

-- The series a name is kept under: itself while its kind has room, else its kind's `(other)`.
-- Each name is looked up once a call, and each kind's count read once.
local labels, kept = {}, {}
local function label(name)
  local kind = string.sub(name, 1, 2)
  local set, cap
  if kind == 't:' then
    set, cap = KEYS[4], a.maxTenants
  elseif kind == 'm:' then
    set, cap = KEYS[5], a.maxModels
  else
    return name
  end
  if labels[name] then
    return labels[name]
  end
  if redis.call('SISMEMBER', set, name) == 1 then
    labels[name] = name
  else
    kept[set] = kept[set] or redis.call('SCARD', set)
    if kept[set] < cap then
      redis.call('SADD', set, name)
      kept[set] = kept[set] + 1
      labels[name] = name
    else
      labels[name] = kind .. '(other)'
    end
  end
  return labels[name]
end

-- Sums, but the least (`wn`, `ln`) and the greatest (`wx`, `lx`) of the extremes.
local LEAST, GREATEST = { wn = true, ln = true }, { wx = true, lx = true }
local function merge(into, from)
  for k, n in pairs(from) do
    local old = into[k]
    if old == nil then
      into[k] = n
    elseif LEAST[k] then
      into[k] = math.min(old, n)
    elseif GREATEST[k] then
      into[k] = math.max(old, n)
    else
      into[k] = old + n
    end
  end
end

local merged = { ['*'] = {} }
for name, fields in pairs(a.series) do
  local l = label(name)
  merged[l] = merged[l] or {}
  merge(merged[l], fields)
end

local backlog = redis.call('LLEN', KEYS[7])
  + redis.call('ZCARD', KEYS[8])
  + redis.call('ZCARD', KEYS[9])
local longest = 0
for i, tier in ipairs(a.tiers) do
  local bucketMs, slots = tier[1], tier[2]
  local bucket = math.floor(now / bucketMs) * bucketMs
  local slot = math.floor(bucket / bucketMs) % slots
  for name, fields in pairs(merged) do
    local field = name .. '|' .. slot
    local at, t = decode(redis.call('HGET', KEYS[i], field))
    if at ~= bucket then
      t = {}
    end
    merge(t, fields)
    if name == '*' then
      t.q, t.qx = backlog, math.max(t.qx or 0, backlog)
    end
    redis.call('HSET', KEYS[i], field, encode(bucket, t))
  end
  local span = bucketMs * (slots + 1)
  redis.call('PEXPIRE', KEYS[i], span)
  if span > longest then
    longest = span
  end
end

-- Each tenant's list is read and written once, however many of its jobs finished.
local fresh, labels = {}, {}
for _, pair in ipairs(a.jobs) do
  local l = label('t:' .. pair[1])
  if not fresh[l] then
    fresh[l] = {}
    labels[#labels + 1] = l
  end
  table.insert(fresh[l], pair[2])
end
for _, l in ipairs(labels) do
  local jobs, list = fresh[l], {}
  for i = #jobs, 1, -1 do
    if #list >= a.keepJobs then
      break
    end
    list[#list + 1] = jobs[i]
  end
  local raw = redis.call('HGET', KEYS[6], l)
  for _, job in ipairs(raw and cjson.decode(raw) or {}) do
    if #list >= a.keepJobs then
      break
    end
    list[#list + 1] = job
  end
  redis.call('HSET', KEYS[6], l, cjson.encode(list))
end
for k = 4, 6 do
  if redis.call('EXISTS', KEYS[k]) == 1 then
    redis.call('PEXPIRE', KEYS[k], longest)
  end
end
return 1
