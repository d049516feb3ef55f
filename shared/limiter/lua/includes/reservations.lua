-- Shared helpers of the limiter scripts. A reservation is stored in the res hash as
-- "requests|input|output|flags|scope1,scope2" where flags is "s" once its stamp is final, "b"
-- once the provider's response began but the reservation stays open (actual accounting).
local DIMS = { 'req', 'in', 'out', 'tok' }

local function now_ms(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function decode(enc)
  local req, inp, out, flags, scopes = string.match(enc, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
  local list = {}
  for s in string.gmatch(scopes, '[^,]+') do list[#list + 1] = s end
  return { req = tonumber(req), inp = tonumber(inp), out = tonumber(out), flags = flags, scopes = list }
end

local function encode(r)
  return r.req .. '|' .. r.inp .. '|' .. r.out .. '|' .. r.flags .. '|' .. table.concat(r.scopes, ',')
end

-- The amount a reservation spends of one dimension.
local function amount(r, dim)
  if dim == 'req' then return r.req end
  if dim == 'in' then return r.inp end
  if dim == 'out' then return r.out end
  return r.inp + r.out
end

-- Increments meant for one hash, summed in the script so that a run that settles or admits
-- many calls writes each field once (flush_tally) instead of once a call.
local function new_tally()
  return { sums = {}, order = {} }
end

local function tally(t, field, n)
  local sum = t.sums[field]
  if sum == nil then
    t.order[#t.order + 1] = field
    t.sums[field] = n
  else
    t.sums[field] = sum + n
  end
end

-- What the tally holds of `field` and has not written yet.
local function tallied(t, field)
  return t.sums[field] or 0
end

local function flush_tally(t, key)
  for _, field in ipairs(t.order) do
    local n = t.sums[field]
    -- A zero is not written: readers take a missing field for 0, and Lua's -0 would be sent
    -- as "-0", which HINCRBY refuses.
    if n ~= 0 then redis.call('HINCRBY', key, field, n) end
  end
  t.sums = {}
  t.order = {}
end

-- Adds sign * the reservation's spend, for each of its scopes, to a tally of the totals.
local function tally_totals(t, r, sign)
  for _, s in ipairs(r.scopes) do
    for _, d in ipairs(DIMS) do
      local a = amount(r, d)
      if a ~= 0 then tally(t, s .. '|' .. d, sign * a) end
    end
  end
end

-- Adds sign * the reservation's spend to the running totals of each of its scopes, now.
local function add_totals(totKey, r, sign)
  local t = new_tally()
  tally_totals(t, r, sign)
  flush_tally(t, totKey)
end

-- Drops the reservations whose stamp has left the window and takes them off the totals.
-- Bounded per call; whatever is left over is still counted, which only errs on the safe side.
local function expire_log(logKey, resKey, totKey, now, windowMs)
  local ids = redis.call('ZRANGEBYSCORE', logKey, '-inf', now - windowMs, 'LIMIT', 0, 500)
  if #ids == 0 then return 0 end
  local encs = redis.call('HMGET', resKey, unpack(ids))
  local t = new_tally()
  for i = 1, #ids do
    if encs[i] then tally_totals(t, decode(encs[i]), -1) end
  end
  flush_tally(t, totKey)
  redis.call('HDEL', resKey, unpack(ids))
  redis.call('ZREM', logKey, unpack(ids))
  return #ids
end

-- Frees the concurrency slots whose lease ran out (their holder died or hung).
local function expire_slots(slotsKey, now)
  local ids = redis.call('ZRANGEBYSCORE', slotsKey, '-inf', now, 'LIMIT', 0, 500)
  if #ids > 0 then redis.call('ZREM', slotsKey, unpack(ids)) end
  return #ids
end

-- Another client's spend, as the provider's headers showed it (see observe). What was certainly
-- someone else's is held: the highest reading until its own time, then the highest since it
-- until that one's (`steps`, in time order, each { until ms, amount }). What may have been ours
-- (calls the provider may have counted before their response reached us) counts only until the
-- next reading (`last`, { until ms, amount }). The spend counted now is the larger of the two.
-- `promoted` says the first step is the stored next: the held reading before it has lapsed.
local function foreign_of(extKey, field, now)
  local e = redis.call('HMGET', extKey, field, field .. '|until', field .. '|next',
    field .. '|next|until', field .. '|last', field .. '|last|until')
  local f = { steps = {}, last = nil, promoted = false }
  local peakUntil = tonumber(e[2] or '0')
  if e[1] and peakUntil > now then f.steps[1] = { peakUntil, tonumber(e[1]) } end
  local nextUntil = tonumber(e[4] or '0')
  if e[3] and nextUntil > now and (f.steps[1] == nil or nextUntil > peakUntil) then
    f.steps[#f.steps + 1] = { nextUntil, tonumber(e[3]) }
    f.promoted = #f.steps == 1
  end
  local lastUntil = tonumber(e[6] or '0')
  if e[5] and lastUntil > now then f.last = { lastUntil, tonumber(e[5]) } end
  return f
end

-- The foreign spend still counted `at` ms after `now`.
local function foreign_at(f, now, at)
  local a = 0
  for _, st in ipairs(f.steps) do
    if st[1] - now > at then
      a = st[2]
      break
    end
  end
  if f.last and f.last[1] - now > at and f.last[2] > a then a = f.last[2] end
  return a
end

-- The moments (ms from `now`) at which the foreign spend may step down, in order.
local function foreign_moments(f, now)
  local m = {}
  for _, st in ipairs(f.steps) do m[#m + 1] = st[1] - now end
  if f.last then m[#m + 1] = f.last[1] - now end
  table.sort(m)
  return m
end
