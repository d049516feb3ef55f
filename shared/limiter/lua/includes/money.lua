-- Money budgets: a call's worst case (µ$) is held against every budget it falls under at
-- admission, or it is not admitted. `mk`: spend (HASH "<period>|<name>" -> µ$; "|day" the newest
-- day seen), held (HASH id -> msgpack { µ$, fields }). A claim: { micros, limits, fields }.

-- The first limit of claim m without room for it now, and what that budget has spent.
local function money_short(mk, m)
  for _, l in ipairs(m.limits) do
    local spent = tonumber(redis.call('HGET', mk.spend, l.field) or '0')
    if spent + m.micros > l.limit then
      return l, spent
    end
  end
end
local function money_hold(mk, id, m)
  for _, f in ipairs(m.fields) do
    redis.call('HINCRBY', mk.spend, f, m.micros)
  end
  redis.call('HSET', mk.held, id, cmsgpack.pack({ m.micros, m.fields }))
end
