-- Whether a cost fits, how long until it would, and admitting it, in one acquire's `run`. A cost
-- may carry its own scopes (`cost.limits`) and money. Needs "reservation", "money", "view".

-- `run` (a script's keys, clock and arguments) with the caches a run fills as it reads and
-- admits, each empty.
local function with_caches(run)
  run.totals, run.stats, run.own, run.views, run.shapes = {}, {}, {}, {}, {}
  run.awaiting, run.answered, run.written = {}, {}, {}
  return run
end

-- A model's scope with no limits configured and no answer yet (it takes one call); read once a
-- run (only record-10.lua marks an answer).
local function unanswered(run, scope)
  if not scope.unknown then
    return false
  end
  local field = scope.name .. '|answered'
  if run.answered[field] == nil then
    run.answered[field] = redis.call('HEXISTS', run.view, field) == 1
  end
  return not run.answered[field]
end

-- In `scope`, `dim`: the configured limit capped by the provider's (0: none), the stored reading,
-- the most to spend (the limit less headroom).
local function limit_of(run, scope, dim)
  local stored = view_of(run, scope.name .. '|' .. dim)
  local limit = scope.limits[dim] or 0
  if stored and stored.lim > 0 and (limit == 0 or stored.lim < limit) then
    limit = stored.lim
  end
  if limit == 0 and dim == 'req' and unanswered(run, scope) then
    limit = 1
  end
  local most = limit > 0 and math.max(1, math.floor(limit * (1 - run.headroom))) or 0
  return limit, stored, most
end

-- Our window sum (with what this run admitted) and count of what left, for `field`
-- ("scope|dim"). A scope's dimensions are read together, once a run (tot_of).
local function own_of(run, field)
  if not run.own[field] then
    local scope = string.match(field, '^(.*)|[^|]+$')
    local used, left = tot_of(run, scope)
    for _, dim in ipairs(DIMS) do
      run.own[scope .. '|' .. dim] = { used[dim], left[dim] }
    end
  end
  local own = run.own[field]
  return own[1] + (run.totals[field] or 0), own[2]
end

-- The fresh bucket reading covering `cost` in `scope`, `dim`: the scope's own, else its model
-- scope's; nil if none.
local function bucket_of(run, scope, dim, cost)
  local name = scope.name
  if not view_of(run, name .. '|' .. dim) then
    for _, other in ipairs(cost.limits or run.scopes) do
      if string.sub(other.name, 1, 6) == 'model:' then
        name = other.name
      end
    end
  end
  local stored = view_of(run, name .. '|' .. dim)
  local fresh = stored and run.now < stored.at + run.windowMs
  if fresh and shape_of(run, name, dim) == 'b' then
    return stored
  end
end

-- The most `cost` may take in `scope`, `dim` now (nil: nothing limits it), the refill per ms (0:
-- as our entries leave), the lapse of the reading behind it (0: none). Two bounds, the lower
-- stands: our window under the cap (skipped when a fresh bucket ≥ the cap covers the cost), and
-- the provider's projected room less its share of headroom. The view (view-4.lua) reads the same.
local function room_of(run, scope, dim, cost)
  local limit, stored, most = limit_of(run, scope, dim)
  if limit == 0 then
    return nil, 0, 0
  end
  local used, left = own_of(run, scope.name .. '|' .. dim)
  local configured = scope.limits[dim] or 0
  local bucket = bucket_of(run, scope, dim, cost)
  local room, rate, lapse = math.huge, 0, 0
  if not (bucket and (configured == 0 or configured >= bucket.lim)) then
    room = most - used
  end
  local provider, refill = projected(run, scope.name, dim, stored, used, left)
  if provider then
    provider = provider - math.floor(stored.lim * run.headroom)
    if provider < room then
      room, rate, lapse = provider, refill, stored.at + run.windowMs
    end
  end
  return room, rate, lapse
end

-- What `cost` lacks in `scope`, `dim` now (≤ 0: fits), with room_of's refill and lapse.
local function lack_of(run, scope, dim, cost)
  local room, rate, lapse = room_of(run, scope, dim, cost)
  if not room then
    return -1, 0, 0
  end
  return amount(cost, dim) - room, rate, lapse
end

-- How many of the oldest window entries a wait reads at most (some 3 µs each): past them, the
-- head looks again once they have left, when the next are the oldest.
local WAIT_SCAN = 256

-- How long until `need` more is free (refilled, or our entries leave), at most until the lapse.
-- Entries leave oldest first; when the first WAIT_SCAN of them free too little, the wait ends
-- as the last of those leaves (an early look again, never a late one).
local function wait_for(run, scope, dim, need, rate, lapse)
  local most = run.windowMs
  if lapse > 0 then
    most = math.max(1, math.min(most, lapse - run.now))
  end
  if rate > 0 then
    return math.max(1, math.min(most, math.ceil(need / rate)))
  end
  local horizon = run.now + most - run.windowMs
  local entries =
    redis.call('ZRANGEBYSCORE', run.log, '-inf', horizon, 'WITHSCORES', 'LIMIT', 0, WAIT_SCAN)
  if #entries == 0 then
    return most
  end
  local ids = {}
  for i = 1, #entries, 2 do
    ids[#ids + 1] = entries[i]
  end
  -- When the k-th entry read leaves the window.
  local function leaves(k)
    return math.max(1, tonumber(entries[2 * k]) + run.windowMs - run.now)
  end
  local freed = 0
  for k, enc in ipairs(redis.call('HMGET', run.res, unpack(ids))) do
    local reservation = enc and decode(enc)
    if reservation and in_scope(reservation, scope.name) then
      freed = freed + amount(reservation, dim)
      if freed >= need then
        return leaves(k)
      end
    end
  end
  if #ids == WAIT_SCAN then
    return math.min(most, leaves(#ids))
  end
  return most
end

-- The first scope and dimension where `cost` does not fit now, with what it lacks; or nil.
local function short_of(run, cost)
  for _, scope in ipairs(cost.limits or run.scopes) do
    for _, dim in ipairs(DIMS) do
      local need, rate, lapse = lack_of(run, scope, dim, cost)
      if need > 0 then
        return scope, dim, need, rate, lapse
      end
    end
  end
end

-- Beside another client's spend on a window, the last of the room (its largest rise from one
-- reading to the next: about one of its calls, reading.lua) is where its next call lands, often
-- while ours are on their way. A call of ours that goes into it goes as a probe: one at a time
-- a scope, the next once the last one's answer began (its reading came). A collision there
-- costs one call, not every call sent meanwhile. Returns the scopes where `cost` goes into the
-- last room, and the first of them with a probe out (nil: none).
local function last_room(run, cost)
  local into = {}
  for _, scope in ipairs(cost.limits or run.scopes) do
    for _, dim in ipairs(DIMS) do
      local stored = view_of(run, scope.name .. '|' .. dim)
      local rising = stored
        and stored.rise > 0
        and run.now < stored.riseAt + run.windowMs
        and shape_of(run, scope.name, dim) == 'w'
      local room = rising and room_of(run, scope, dim, cost)
      if room and amount(cost, dim) > room - stored.rise then
        into[#into + 1] = scope.name
        break
      end
    end
  end
  for _, name in ipairs(into) do
    if probes_of(run).live[name] then
      return into, name
    end
  end
  return into, nil
end

-- Call `id` (`cost`, before admit writes it) goes as the probe of each scope in `into`, until
-- its answer begins or it ends (record-10.lua, which the reservation's `probe` tells), or its
-- lease's end.
local function send_probe(run, id, cost, into)
  if #into == 0 then
    return
  end
  cost.probe = true
  local probes = probes_of(run)
  for _, name in ipairs(into) do
    probes.live[name] = { id = id, untilMs = run.leaseExpiry }
    probes.changed = true
  end
end

-- Calls in flight in scope `name` whose answer has not begun (lease live), counted once a run
-- from its set of them (reservation.lua's awaiting_key); `count_awaiting` adds the run's.
local function awaiting_in(run, name)
  local count = run.awaiting[name]
  if count then
    return count
  end
  local key = awaiting_key(run.slots, name)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', run.now)
  count = redis.call('ZCARD', key)
  run.awaiting[name] = count
  return count
end

-- The first scope of `cost` whose unanswered calls hold all the slots it may (`slots`), or nil.
local function share_full(run, cost)
  for _, scope in ipairs(cost.limits or run.scopes) do
    if (scope.slots or 0) > 0 and awaiting_in(run, scope.name) >= scope.slots then
      return scope
    end
  end
end

-- An admitted call joins the awaiting calls of its scopes with a share of the slots.
local function count_awaiting(run, id, cost)
  for _, scope in ipairs(cost.limits or run.scopes) do
    if (scope.slots or 0) > 0 then
      run.awaiting[scope.name] = awaiting_in(run, scope.name) + 1
      keep_awaiting(run.slots, scope.name, id, run.leaseExpiry, run.now)
      cost.awaiting = true
    end
  end
end

-- How many admissions a run holds unwritten at most: it writes as it goes, so the clock an
-- acquire's budget reads has seen all but the last few admissions' writes (some 60 µs, far
-- below the budget), while sums every call shares (global, a model) are not rewritten per call.
local WRITE_EVERY = 8

-- What the run admitted so far: its reservations (one HSET) and its sums, which the sums it
-- read (own_of) take in, so each counts once.
local function write_admitted(run)
  local fields = run.written
  run.written = {}
  if #fields > 0 then
    redis.call('HSET', run.res, unpack(fields))
  end
  for field, delta in pairs(run.totals) do
    local own = run.own[field]
    if own then
      own[1] = own[1] + delta
    end
  end
  flush(run.totals, run.tot)
  run.totals = {}
end

-- An open reservation, stamped at its lease's end until the call starts or settles. Its entry
-- in res is written with the run's others (write_admitted), at most WRITE_EVERY admissions
-- later; nothing in the run reads it before.
local function admit(run, id, cost)
  count_awaiting(run, id, cost)
  redis.call('ZADD', run.log, run.leaseExpiry, id)
  redis.call('ZADD', run.slots, run.leaseExpiry, id)
  run.written[#run.written + 1] = id
  run.written[#run.written + 1] = encode(cost)
  add_spend(run.totals, cost, 1)
  add_open(run.totals, cost, 1)
  local stats = run.stats
  for field, by in pairs({ admitted = 1, reserved_in = cost.inp, reserved_out = cost.out }) do
    stats[field] = (stats[field] or 0) + by
  end
  if cost.money then
    money_hold(run.moneyKeys, id, cost.money)
  end
  -- `written` holds id, reservation pairs.
  if #run.written >= 2 * WRITE_EVERY then
    write_admitted(run)
  end
end

-- Writes what the run admitted and counted, and answers.
local function finish_run(run, reply)
  write_admitted(run)
  write_probes(run)
  flush(run.stats, run.statsKey)
  return reply
end
