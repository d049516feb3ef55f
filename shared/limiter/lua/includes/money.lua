-- Money budgets, decided with admission: a call's worst-case cost (whole µ$) is held against
-- every budget it falls under when it is admitted, or it is not admitted; its end settles the
-- hold to the actual cost or gives it back. `mk` holds the two keys and the periods kept:
--   spend  HASH "<period id>|<name>" -> µ$ spent ("2026-12-01|tenant:a", "2026-12|model:x"),
--          "|day" -> the newest day seen (older periods than the one before are dropped)
--   held   HASH reservation id -> msgpack { µ$, fields charged }
-- A claim (`m`, packed by scripts.ts): { micros, limits = list of { field, budget, period,
-- limit }, fields = every field charged: the limits' and the model's }.

-- The first limit of claim `m` without room for it now, and what that budget has spent.
local function money_short(mk, m)
  for _, l in ipairs(m.limits) do
    local spent = tonumber(redis.call('HGET', mk.spend, l.field) or '0')
    if spent + m.micros > l.limit then return l, spent end
  end
  return nil, 0
end

-- Once a day: drops the fields of periods before the previous one, and keeps both hashes two
-- months past the last day that held money. Only forwards: a worker whose clock is behind
-- never drops the newer day.
local function money_keep(mk)
  if mk.kept or not mk.periods then return end
  mk.kept = true
  local day = mk.periods[1]
  local seen = redis.call('HGET', mk.spend, '|day')
  if seen and seen >= day then return end
  local keep = {}
  for _, p in ipairs(mk.periods) do keep[p] = true end
  local old = {}
  for _, f in ipairs(redis.call('HKEYS', mk.spend)) do
    local p = string.match(f, '^([^|]*)|')
    if p and p ~= '' and not keep[p] then old[#old + 1] = f end
  end
  if #old > 0 then redis.call('HDEL', mk.spend, unpack(old)) end
  redis.call('HSET', mk.spend, '|day', day)
  redis.call('PEXPIRE', mk.spend, 5356800000)
  redis.call('PEXPIRE', mk.held, 5356800000)
end

-- Holds claim `m` for reservation `id` (its room was checked by money_short).
local function money_hold(mk, id, m)
  for _, f in ipairs(m.fields) do redis.call('HINCRBY', mk.spend, f, m.micros) end
  redis.call('HSET', mk.held, id, cmsgpack.pack({ m.micros, m.fields }))
  money_keep(mk)
end

-- Ends the hold of reservation `id`: settled to `micros` (0 gives it all back; nil leaves its
-- worst case spent). Returns the change in µ$ (0 for an id that holds nothing).
local function money_settle(mk, id, micros)
  local enc = redis.call('HGET', mk.held, id)
  if not enc then return 0 end
  local h = cmsgpack.unpack(enc)
  local delta = 0
  if micros then delta = micros - h[1] end
  if delta ~= 0 then
    for _, f in ipairs(h[2]) do redis.call('HINCRBY', mk.spend, f, delta) end
  end
  redis.call('HDEL', mk.held, id)
  return delta
end
