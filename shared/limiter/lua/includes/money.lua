-- Money budgets: a call's worst case (µ$) is held against every budget it falls under at
-- admission, or it is not admitted. `moneyKeys`: spend (HASH "<period>|<name>" -> µ$; "|day" the
-- newest day seen), held (HASH id -> msgpack { µ$, fields }). A call's `money`: { micros, limits,
-- fields }.

-- The first limit of `money` without room for it now, and what that budget has spent.
local function money_short(moneyKeys, money)
  for _, bound in ipairs(money.limits) do
    local spent = tonumber(redis.call('HGET', moneyKeys.spend, bound.field) or '0')
    if spent + money.micros > bound.limit then
      return bound, spent
    end
  end
end
local function money_hold(moneyKeys, id, money)
  for _, field in ipairs(money.fields) do
    redis.call('HINCRBY', moneyKeys.spend, field, money.micros)
  end
  redis.call('HSET', moneyKeys.held, id, cmsgpack.pack({ money.micros, money.fields }))
end
