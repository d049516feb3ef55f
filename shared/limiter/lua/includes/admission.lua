-- One acquire's run (`run`: its keys, clock, scopes and what it admitted so far): whether a
-- cost fits, and admitting it. What the run admits is added to the totals and counters once,
-- at its end (finish_run); need_of counts it meanwhile. A cost may carry its own scopes with
-- their limits (`c.limits`; else the run's) and a money claim (`c.money`). Needs "tally",
-- "foreign-spend" and "money".

-- Another client's spend in `field` (foreign_of), read once a run: nothing in a run changes it.
local function run_foreign(run, field)
  local f = run.foreign[field]
  if f == nil then
    f = foreign_of(run.ext, field, run.now)
    run.foreign[field] = f
  end
  return f
end

-- What `c` lacks in scope s, dimension d, now (0 or less: it fits), the foreign spend, and the
-- room kept in it: beside another client's spend (`run.leaveRoom`), room for one of its calls
-- (the largest rise of that spend between two readings) stays free, for as long as that spend
-- is counted: its next call lands there, often while ours are on their way, and then both fit.
local function need_of(run, s, d, c)
  local field = s.name .. '|' .. d
  local used = tonumber(redis.call('HGET', run.tot, field) or '0') + tallied(run.totals, field)
  local f = run_foreign(run, field)
  local kept = 0
  if run.leaveRoom and #f.steps > 0 then kept = f.rise end
  return used + foreign_at(f, run.now, 0) + kept + amount(c, d) - s.limits[d], f, kept
end

-- Whether c fits every dimension of every scope, its money budgets and a slot right now,
-- leaving `spareSlots`.
local function fits_now(run, c, spareSlots)
  if run.maxSlots > 0 and redis.call('ZCARD', run.slots) + 1 + spareSlots > run.maxSlots then
    return false
  end
  for _, s in ipairs(c.limits or run.scopes) do
    for _, d in ipairs(DIMS) do
      if s.limits[d] > 0 and need_of(run, s, d, c) > 0 then return false end
    end
  end
  return not (c.money and money_short(run.money, c.money))
end

-- An open reservation whose stamp is its lease expiry until the call starts or settles.
local function admit(run, id, c)
  redis.call('ZADD', run.log, run.leaseExpiry, id)
  redis.call('HSET', run.res, id, encode(c))
  tally_totals(run.totals, c, 1)
  redis.call('ZADD', run.slots, run.leaseExpiry, id)
  tally(run.stats, 'admitted', 1)
  tally(run.stats, 'reserved_in', c.inp)
  tally(run.stats, 'reserved_out', c.out)
  if c.money then money_hold(run.money, id, c.money) end
end

local function finish_run(run, reply)
  flush_tally(run.totals, run.tot)
  flush_tally(run.stats, run.statsKey)
  return reply
end
