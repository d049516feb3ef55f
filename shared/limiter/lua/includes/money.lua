-- Money budgets, decided with admission: a call's worst case (whole µ$) is held against every
-- budget it falls under, or it is not admitted; its end settles the hold. `mk`: the keys
--   spend  HASH "<period id>|<name>" -> µ$ spent; "|day" -> the newest day seen
--   held   HASH reservation id -> msgpack { µ$, fields charged }
-- and the periods kept. A claim `m`: { micros, limits = { field, budget, period, limit }, fields }.

-- The first limit of claim m without room for it now, and what that budget has spent.
local function money_short(mk, m)
  for _, l in ipairs(m.limits) do
    local spent = tonumber(redis.call('HGET', mk.spend, l.field) or '0')
    if spent + m.micros > l.limit then return l, spent end
  end
  return nil, 0
end

local function money_hold(mk, id, m)
  for _, f in ipairs(m.fields) do redis.call('HINCRBY', mk.spend, f, m.micros) end
  redis.call('HSET', mk.held, id, cmsgpack.pack({ m.micros, m.fields }))
end
