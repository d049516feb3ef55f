--[[
  Adds what a worker's calls and counters did to the queue's usage history (shared/history.ts):
  each series' fields to the current bucket of every tier (a ring of slots: a slot holding an
  older bucket starts afresh; fields add up, but `wn` `ln` keep the least value and `wx` `lx`
  the greatest), the backlog to the fleet's (`q` as last seen, `qx` the most), and tenants'
  finished jobs to their lists (a tier's slots, and the lists, read in one HMGET and written in
  one HSET a call). Tenants and models past the caps count as `t:(other)` / `m:(other)`. Every
  key expires one range after its last write, so a queue nobody uses keeps nothing. The writer
  splits a flush into calls of a bounded number of tenants (shared/history.ts), so no call's
  work grows with the tenants.

  Input:
    KEYS[1] tier 0        HASH "<series>|<slot>" -> msgpack { ['@'] = bucket start, k = n, ... }
                          (10 s buckets)
    KEYS[2] tier 1        HASH the same, 1 min buckets
    KEYS[3] tier 2        HASH the same, 10 min buckets
    KEYS[4] tenants       SET  tenant series kept by name
    KEYS[5] models        SET  model series kept by name
    KEYS[6] jobs          HASH tenant series -> msgpack list of its latest jobs, newest first
    KEYS[7] wait          LIST BullMQ's wait list of the queue       (read: the backlog)
    KEYS[8] prioritized   ZSET BullMQ's prioritized set of the queue (read)
    KEYS[9] delayed       ZSET BullMQ's delayed set of the queue     (read)
    ARGV[1] msgpack: now (ms; absent: TIME), series { name -> { field -> n } }, jobs (pairs of
      tenant and job), tiers (pairs of bucketMs and slots, three), maxTenants, maxModels, keepJobs

  Output: 1
]]
local a = cmsgpack.unpack(ARGV[1])
local now = a.now
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Whether a stored value is msgpack (a map or an array), not the text an older build wrote.
local function packed(s)
  local first = string.byte(s, 1)
  return first >= 0x80 and first <= 0x9f or first >= 0xdc and first <= 0xdf
end

-- A bucket: its start and fields. Stored as a msgpack map with the start under `@`; a bucket an
-- older build wrote ("<start>;k=v;...") is read too.
local function decode(s)
  if not s then
    return nil, {}
  end
  if packed(s) then
    local t = cmsgpack.unpack(s)
    local at = t['@']
    t['@'] = nil
    return at, t
  end
  local at, t = nil, {}
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
  t['@'] = at
  local s = cmsgpack.pack(t)
  t['@'] = nil
  return s
end

-- A tenant's list of jobs: msgpack; JSON as an older build wrote it.
local function decode_list(s)
  if not s then
    return {}
  end
  return packed(s) and cmsgpack.unpack(s) or cjson.decode(s)
end

-- The series a name is kept under: itself while its kind has room, else its kind's `(other)`.
-- Every name of a call is looked up in one SMISMEMBER a kind (`known`), each kind's count read
-- once.
local KINDS =
  { ['t:'] = { set = KEYS[4], cap = a.maxTenants }, ['m:'] = { set = KEYS[5], cap = a.maxModels } }
local labels, kept = {}, {}
local function known(names)
  local byKind = {}
  for _, name in ipairs(names) do
    local kind = KINDS[string.sub(name, 1, 2)]
    if kind and labels[name] == nil then
      labels[name] = false
      byKind[kind] = byKind[kind] or {}
      table.insert(byKind[kind], name)
    end
  end
  for kind, list in pairs(byKind) do
    for i, member in ipairs(redis.call('SMISMEMBER', kind.set, unpack(list))) do
      if member == 1 then
        labels[list[i]] = list[i]
      end
    end
  end
end
local function label(name)
  local prefix = string.sub(name, 1, 2)
  local kind = KINDS[prefix]
  if not kind then
    return name
  end
  if not labels[name] then
    kept[kind.set] = kept[kind.set] or redis.call('SCARD', kind.set)
    if kept[kind.set] < kind.cap then
      redis.call('SADD', kind.set, name)
      kept[kind.set] = kept[kind.set] + 1
      labels[name] = name
    else
      labels[name] = prefix .. '(other)'
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

local names = {}
for name in pairs(a.series) do
  names[#names + 1] = name
end
for _, pair in ipairs(a.jobs) do
  names[#names + 1] = 't:' .. pair[1]
end
known(names)
local merged, series = { ['*'] = {} }, { '*' }
for name, fields in pairs(a.series) do
  local l = label(name)
  if not merged[l] then
    merged[l] = {}
    series[#series + 1] = l
  end
  merge(merged[l], fields)
end

-- Each tier's slots of every series read in one HMGET and written in one HSET.
local backlog = redis.call('LLEN', KEYS[7])
  + redis.call('ZCARD', KEYS[8])
  + redis.call('ZCARD', KEYS[9])
local longest = 0
for i, tier in ipairs(a.tiers) do
  local bucketMs, slots = tier[1], tier[2]
  local bucket = math.floor(now / bucketMs) * bucketMs
  local slot = math.floor(bucket / bucketMs) % slots
  local fields, writes = {}, {}
  for k, name in ipairs(series) do
    fields[k] = name .. '|' .. slot
  end
  local stored = redis.call('HMGET', KEYS[i], unpack(fields))
  for k, name in ipairs(series) do
    local at, t = decode(stored[k])
    if at ~= bucket then
      t = {}
    end
    merge(t, merged[name])
    if name == '*' then
      t.q, t.qx = backlog, math.max(t.qx or 0, backlog)
    end
    writes[#writes + 1] = fields[k]
    writes[#writes + 1] = encode(bucket, t)
  end
  redis.call('HSET', KEYS[i], unpack(writes))
  local span = bucketMs * (slots + 1)
  redis.call('PEXPIRE', KEYS[i], span)
  if span > longest then
    longest = span
  end
end

-- Every tenant's list is read and written once (one HMGET, one HSET), however many of its jobs
-- finished.
local fresh, lists = {}, {}
for _, pair in ipairs(a.jobs) do
  local l = label('t:' .. pair[1])
  if not fresh[l] then
    fresh[l] = {}
    lists[#lists + 1] = l
  end
  table.insert(fresh[l], pair[2])
end
if #lists > 0 then
  local stored, writes = redis.call('HMGET', KEYS[6], unpack(lists)), {}
  for k, l in ipairs(lists) do
    local jobs, list = fresh[l], {}
    for i = #jobs, 1, -1 do
      if #list >= a.keepJobs then
        break
      end
      list[#list + 1] = jobs[i]
    end
    for _, job in ipairs(decode_list(stored[k])) do
      if #list >= a.keepJobs then
        break
      end
      list[#list + 1] = job
    end
    writes[#writes + 1] = l
    writes[#writes + 1] = cmsgpack.pack(list)
  end
  redis.call('HSET', KEYS[6], unpack(writes))
end
for k = 4, 6 do
  if redis.call('EXISTS', KEYS[k]) == 1 then
    redis.call('PEXPIRE', KEYS[k], longest)
  end
end
return 1
