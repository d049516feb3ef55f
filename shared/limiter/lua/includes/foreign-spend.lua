-- Another client's spend, as the provider's headers showed it (see observe). What was certainly
-- someone else's is held: the highest reading until its own time, then the highest since it
-- until that one's (`steps`, in time order, each { until ms, amount }). What may have been ours
-- (calls the provider may have counted before their response reached us) counts only until the
-- next reading (`last`, { until ms, amount }). The spend counted now is the larger of the two.
-- `promoted` says the first step is the stored next: the held reading before it has lapsed.
-- `rise`: the largest rise of it from one reading to the next within a window, about one of
-- that client's calls (0: none seen). `exact`: the limit of the latest reading when it was
-- exact (not rounded) and is less than a window old, else nil.
local function foreign_of(extKey, field, now)
  local e = redis.call('HMGET', extKey, field, field .. '|until', field .. '|next',
    field .. '|next|until', field .. '|last', field .. '|last|until', field .. '|seen',
    field .. '|seen|until', field .. '|rise', field .. '|rise|until', field .. '|exact',
    field .. '|exact|until')
  -- `seen`: what the reading before may have counted of another client's (observe's rule).
  local f = { steps = {}, last = nil, promoted = false, seen = 0, rise = 0, exact = nil }
  if e[7] and tonumber(e[8] or '0') > now then f.seen = tonumber(e[7]) end
  if e[9] and tonumber(e[10] or '0') > now then f.rise = tonumber(e[9]) end
  if e[11] and tonumber(e[12] or '0') > now then f.exact = tonumber(e[11]) end
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

-- Whether the provider's latest readings show its count exactly and nobody else's spend in
-- it: its limit at least `limit`, no other client's spend held or rising, nothing possibly
-- another's. Then headroom has nothing to cover (see acquire).
local function seen_exactly(f, limit)
  return f.exact ~= nil and f.exact >= limit and #f.steps == 0 and f.last == nil and f.rise == 0
    and f.seen == 0
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
