-- Whether a cost fits, how long until it would, and admitting it, in one acquire's `run`. A cost
-- may carry its own scopes (`c.limits`) and money. Needs "reservation", "money", "view".

-- A model's scope with no limits configured and no answer yet (it takes one call).
local function unanswered(run, s)
  return s.unknown and redis.call('HEXISTS', run.view, s.name .. '|answered') == 0
end

-- Scope s, dim d: the configured limit capped by the provider's (0: none), its view, the most to spend.
local function limit_of(run, s, d)
  local v, lim = view_of(run, s.name .. '|' .. d), s.limits[d] or 0
  if v and v.lim > 0 and (lim == 0 or v.lim < lim) then
    lim = v.lim
  end
  if lim == 0 and d == 'req' and unanswered(run, s) then
    lim = 1
  end
  return lim, v, lim > 0 and math.max(1, math.floor(lim * (1 - run.headroom))) or 0
end

-- Our window sum (with what this run admitted) and count of what left, for `field`.
local function own_of(run, field)
  if not run.own[field] then
    run.own[field] = redis.call('HMGET', run.tot, field, field .. '|left')
  end
  local o = run.own[field]
  return tonumber(o[1] or '0') + (run.totals[field] or 0), tonumber(o[2] or '0')
end

-- The fresh bucket reading covering c in s, d: s's own, else its model scope's; nil if none.
local function bucket_of(run, s, d, c)
  local name = s.name
  if not view_of(run, name .. '|' .. d) then
    for _, m in ipairs(c.limits or run.scopes) do
      if string.sub(m.name, 1, 6) == 'model:' then
        name = m.name
      end
    end
  end
  local v = view_of(run, name .. '|' .. d)
  if v and run.now < v.at + run.windowMs and shape_of(run, name, d) == 'b' then
    return v
  end
end

-- The most c may take in s, d now (nil: nothing limits it), the refill per ms (0: as our entries
-- leave), the lapse of the reading behind it (0: none). Two bounds, the lower stands: our window
-- under the cap (skipped when a fresh bucket ≥ the cap covers c), and the provider's projected
-- room less its share of headroom. The view (view-4.lua) reads the same.
local function room_of(run, s, d, c)
  local lim, v, most = limit_of(run, s, d)
  if lim == 0 then
    return nil, 0, 0
  end
  local used, left = own_of(run, s.name .. '|' .. d)
  local conf, b = s.limits[d] or 0, bucket_of(run, s, d, c)
  local room, rate, lapse = math.huge, 0, 0
  if not (b and (conf == 0 or conf >= b.lim)) then
    room = most - used
  end
  local provider, refill = projected(run, s.name, d, v, used, left)
  if provider then
    provider = provider - math.floor(v.lim * run.headroom)
    if provider < room then
      room, rate, lapse = provider, refill, v.at + run.windowMs
    end
  end
  return room, rate, lapse
end

-- What c lacks in s, d now (≤ 0: fits), with room_of's refill and lapse.
local function lack_of(run, s, d, c)
  local room, rate, lapse = room_of(run, s, d, c)
  if not room then
    return -1, 0, 0
  end
  return amount(c, d) - room, rate, lapse
end

-- How long until `need` more is free (refilled, or our entries leave), at most until the lapse.
local function wait_for(run, s, d, need, rate, lapse)
  local most = run.windowMs
  if lapse > 0 then
    most = math.max(1, math.min(most, lapse - run.now))
  end
  if rate > 0 then
    return math.max(1, math.min(most, math.ceil(need / rate)))
  end
  local freed = 0
  local entries = redis.call(
    'ZRANGEBYSCORE',
    run.log,
    '-inf',
    run.now + most - run.windowMs,
    'WITHSCORES',
    'LIMIT',
    0,
    4000
  )
  for i = 1, #entries, 2 do
    local enc = redis.call('HGET', run.res, entries[i])
    local r = enc and decode(enc)
    if r and in_scope(r, s.name) then
      freed = freed + amount(r, d)
      if freed >= need then
        return math.max(1, tonumber(entries[i + 1]) + run.windowMs - run.now)
      end
    end
  end
  return most
end

-- The first scope and dimension where c does not fit now, with what it lacks; or nil.
local function short_of(run, c)
  for _, s in ipairs(c.limits or run.scopes) do
    for _, d in ipairs(DIMS) do
      local need, rate, lapse = lack_of(run, s, d, c)
      if need > 0 then
        return s, d, need, rate, lapse
      end
    end
  end
end

-- Calls in flight in scope `name` whose answer has not begun (open reservations, lease live),
-- counted once a run; `count_unanswered` adds the ones the run admits.
local function unanswered_in(run, name)
  local n = run.unanswered[name]
  if n then
    return n
  end
  n = 0
  local ids = redis.call('ZRANGEBYSCORE', run.slots, '(' .. run.now, '+inf')
  for from = 1, #ids, 500 do
    local encs = redis.call('HMGET', run.res, unpack(ids, from, math.min(from + 499, #ids)))
    for _, enc in ipairs(encs) do
      if enc then
        local r = decode(enc)
        if r.flags == '' and in_scope(r, name) then
          n = n + 1
        end
      end
    end
  end
  run.unanswered[name] = n
  return n
end

-- The first scope of c whose unanswered calls hold all the slots it may (`slots`), or nil.
local function share_full(run, c)
  for _, s in ipairs(c.limits or run.scopes) do
    if (s.slots or 0) > 0 and unanswered_in(run, s.name) >= s.slots then
      return s
    end
  end
end

local function count_unanswered(run, c)
  for _, s in ipairs(c.limits or run.scopes) do
    if (s.slots or 0) > 0 then
      run.unanswered[s.name] = unanswered_in(run, s.name) + 1
    end
  end
end

-- An open reservation, stamped at its lease's end until the call starts or settles.
local function admit(run, id, c)
  redis.call('ZADD', run.log, run.leaseExpiry, id)
  redis.call('ZADD', run.slots, run.leaseExpiry, id)
  redis.call('HSET', run.res, id, encode(c))
  add_spend(run.totals, c, 1)
  local st = run.stats
  for f, n in pairs({ admitted = 1, reserved_in = c.inp, reserved_out = c.out }) do
    st[f] = (st[f] or 0) + n
  end
  if c.money then
    money_hold(run.money, id, c.money)
  end
end

-- Writes what the run admitted and counted, once each, and answers.
local function finish_run(run, reply)
  flush(run.totals, run.tot)
  flush(run.stats, run.statsKey)
  return reply
end
