-- Storing a provider's reading in the view (see view.lua). Needs "reservation", "view".
local function gcd(a, b)
  while b > 0 do
    a, b = b, a % b
  end
  return a
end

-- What a dimension's reading (`said`: limit, remaining, reset) says of the shape: 'b' when its
-- reset is when a bucket would be full, well before a window; 'w' at a window or later; nil when
-- both or neither fit. `slack`: the reset's resolution (a second), the rounding, the reading's age.
local function shape_says(ctx, said, half, ageMs)
  if not said.reset or said.reset <= 0 or said.limit <= 0 then
    return nil
  end
  local slack = 1000 + 2 * half * ctx.windowMs / said.limit + ageMs
  local untilReset = said.reset - (ctx.now - ageMs)
  local untilFull = (said.limit - said.remaining) * ctx.windowMs / said.limit
  local bucket = math.abs(untilReset - untilFull) <= slack
  local window = untilReset >= ctx.windowMs - slack
  if bucket ~= window then
    return bucket and 'b' or 'w'
  end
end

-- The most log entries one read takes (see uncounted: a read cut short errs on the safe side).
local SCAN = 2000

-- The calls stamped after `since` (ids, reservations decoded, scores), at most SCAN of them. A
-- stamp is scored at its run's clock, an open call at its lease's end: `now` parts them, so the
-- calls still waiting for their answers are not read (their spend is in the open sums).
local function logged_after(ctx, since)
  ctx.write_res()
  local entries =
    redis.call('ZRANGEBYSCORE', ctx.log, '(' .. since, ctx.now, 'WITHSCORES', 'LIMIT', 0, SCAN)
  local ids, scores, reservations, index = {}, {}, {}, {}
  for i = 1, #entries, 2 do
    ids[#ids + 1] = entries[i]
    scores[#scores + 1] = tonumber(entries[i + 1])
    index[entries[i]] = #ids
  end
  if #ids > 0 then
    for i, enc in ipairs(redis.call('HMGET', ctx.res, unpack(ids))) do
      reservations[i] = enc and decode(enc) or false
    end
  end
  return {
    since = since,
    ids = ids,
    scores = scores,
    reservations = reservations,
    index = index,
    marked = {},
  }
end

-- When the call of `reading` was sent (its age as recorded, at most a window).
local function reading_sent(ctx, reading)
  return ctx.now - math.max(0, math.min(reading.ageMs or 0, ctx.windowMs))
end

-- The calls logged after `since`: a run's readings share one read, from the earliest of their
-- sends (`ctx.earliestSent`), unless it was cut short at SCAN (each reads its own then).
local function logged_since(ctx, since)
  if ctx.logged == nil and ctx.earliestSent and ctx.earliestSent <= since then
    ctx.logged = logged_after(ctx, ctx.earliestSent)
    if #ctx.logged.ids == SCAN then
      ctx.logged = false
    end
  end
  if ctx.logged and ctx.logged.since <= since then
    return ctx.logged
  end
  return logged_after(ctx, since)
end

-- The first of the read's entries scored after `since` (one past the last when none is).
local function first_after(logged, since)
  local lo, hi = 1, #logged.scores + 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if logged.scores[mid] > since then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

local function no_spend()
  return { req = 0, ['in'] = 0, out = 0, tok = 0 }
end

-- A scope's sums over the read's entries from each one to the end, built once a read: `stamped`
-- what its begun calls spent, `unread` what those without a reading spent (`counted`: which they
-- are). Calls mark_read marks later are taken out by `uncounted`, from `marked` past `built`.
local function suffix_sums(logged, scope)
  logged.sums = logged.sums or {}
  if logged.sums[scope] then
    return logged.sums[scope]
  end
  local n = #logged.ids
  local stamped, unread, counted = { [n + 1] = no_spend() }, { [n + 1] = no_spend() }, {}
  for i = n, 1, -1 do
    local reservation = logged.reservations[i]
    stamped[i], unread[i] = stamped[i + 1], unread[i + 1]
    if reservation and reservation.flags == 's' and in_scope(reservation, scope) then
      stamped[i], counted[i] = {}, not reservation.read
      if counted[i] then
        unread[i] = {}
      end
      for _, dim in ipairs(DIMS) do
        stamped[i][dim] = stamped[i + 1][dim] + amount(reservation, dim)
        if counted[i] then
          unread[i][dim] = unread[i + 1][dim] + amount(reservation, dim)
        end
      end
    end
  end
  logged.sums[scope] =
    { stamped = stamped, unread = unread, counted = counted, built = #logged.marked }
  return logged.sums[scope]
end

-- Our spend in `scope` the reading of call `id`, sent at `since`, may not have counted: `pending`,
-- calls not begun (under 'produced', output still to come: the open sums, see add_open), and
-- `late`, calls begun after it was sent that brought no reading (the provider may have admitted
-- them after it; one begun by then it admitted before). A begun call that brought a reading was
-- admitted before the newest reading held, which the stored one is at most (see `stands`). Its
-- own call it counted. A scan cut short takes all our begun spend it did not read as late.
-- The run's readings share the read's sums: each costs O(log n) and the calls marked since.
local function uncounted(ctx, scope, since, id, used, open)
  local pending = open
  local logged = logged_since(ctx, since)
  local from = first_after(logged, since)
  local sums = suffix_sums(logged, scope)
  local late = {}
  for _, dim in ipairs(DIMS) do
    late[dim] = sums.unread[from][dim]
  end
  -- Not late: its own call, and calls marked read since the sums were built.
  local out = { logged.index[id] or 0, logged.index[id .. ':in'] or 0 }
  for m = sums.built + 1, #logged.marked do
    out[#out + 1] = logged.marked[m]
  end
  local taken = {}
  for _, i in ipairs(out) do
    if i >= from and sums.counted[i] and not taken[i] then
      taken[i] = true
      for _, dim in ipairs(DIMS) do
        late[dim] = late[dim] - amount(logged.reservations[i], dim)
      end
    end
  end
  if #logged.ids - from + 1 == SCAN then
    for _, dim in ipairs(DIMS) do
      late[dim] = late[dim] + math.max(0, used[dim] - pending[dim] - sums.stamped[from][dim])
    end
  end
  return pending, late
end

-- Marks call `id` as one that brought a reading: its stamped entries (under 'produced', its
-- input part; its whole once ended), through the run's reservations (`ctx.load`, `ctx.store`),
-- and in the run's shared read of the log (`marked`: where, for the sums built before).
local function mark_read(ctx, id)
  for _, key in ipairs(ctx.split and { id, id .. ':in' } or { id }) do
    local reservation = ctx.load(key)
    if reservation and reservation.flags == 's' and not reservation.read then
      reservation.read = true
      ctx.store(key, reservation)
    end
    local i = ctx.logged and ctx.logged.index[key]
    local shared = i and ctx.logged.reservations[i]
    if shared and shared.flags == 's' and not shared.read then
      shared.read = true
      ctx.logged.marked[#ctx.logged.marked + 1] = i
    end
  end
end

-- Whether the stored reading of scope, dim stands against `new`: readings of calls in flight
-- together (the stored one recorded after the moment new's call was sent) were taken in an order we cannot
-- see, and another client may have spent between them; each projection is the room if nobody
-- else spent since its own reading, so the one that leaves less room stands.
local function stands(ctx, scope, dim, new, since, used, left)
  local stored = view_of(ctx, scope .. '|' .. dim)
  if not stored or stored.at <= since or stored.lim ~= new.lim then
    return false
  end
  local old = projected(ctx, scope, dim, stored, used, left)
  return old ~= nil and old < projected(ctx, scope, dim, new, used, left)
end

-- Another client's spend in a dimension as `said` shows it, at the least (`fmin`): the
-- provider's count at the high end of its rounding, less the most of ours it can have counted
-- (`ours`: our window but the calls not begun). Its largest rise from one reading to the next,
-- about one of that client's calls, counts for a window (`rise`, `riseAt`: admission.lua's
-- last room). Readings a window apart tell no rise.
local function foreign_rise(ctx, stored, said, half, ours)
  local fmin = math.max(0, said.limit - said.remaining - half - ours)
  local rise, riseAt = 0, 0
  if stored and ctx.now < stored.riseAt + ctx.windowMs then
    rise, riseAt = stored.rise, stored.riseAt
  end
  local fresh = stored and ctx.now < stored.at + ctx.windowMs
  if fresh and fmin - stored.fmin >= math.max(rise, 1) then
    rise, riseAt = fmin - stored.fmin, ctx.now
  end
  return fmin, rise, riseAt
end

-- The rounding step that divides every rounded value of `reading` (a limit need not), with the
-- gcd to store as `|rg`: `storedGcd` is the one so far, negative while one value was read (the
-- limit stands in for a second).
local function rounding_of(reading, storedGcd)
  local roundingGcd, limit = storedGcd, 0
  for _, dim in ipairs(DIMS) do
    local said = reading.dims[dim]
    if said and dim ~= 'req' and said.remaining > 0 then
      if roundingGcd == 0 or roundingGcd == -said.remaining then
        roundingGcd = -said.remaining
      else
        roundingGcd = gcd(math.abs(roundingGcd), said.remaining)
      end
      limit = said.limit
    end
  end
  local step = roundingGcd < 0 and gcd(limit, -roundingGcd) or roundingGcd
  return step, roundingGcd
end

-- Stores `reading` = { scope, id, ageMs, dims = { [dim] = { limit, remaining, reset } } } of
-- call id, sent ageMs ago. `seen` leaves out the calls begun since it was sent: the provider may
-- have admitted them after it, so no projection takes them as counted. What it writes goes in
-- one HSET, and into the run's copies of the view (`ctx.views`, `ctx.shapes`), which the run's
-- next readings read.
local function store_reading(ctx, reading)
  local scope = reading.scope
  local sent = reading_sent(ctx, reading)
  local used, left, open = tot_of(ctx, scope)
  local pending, late = uncounted(ctx, scope, sent, reading.id, used, open)
  local known = shape_known(ctx, scope)
  local step, roundingGcd = rounding_of(reading, known.rg)
  local shape = nil
  local writes = {}
  local function write(field, value)
    writes[#writes + 1] = field
    writes[#writes + 1] = value
  end
  for _, dim in ipairs(DIMS) do
    local said = reading.dims[dim]
    if said then
      local field = scope .. '|' .. dim
      local half = dim ~= 'req' and math.floor(step / 2) or 0
      local stored = view_of(ctx, field)
      local fmin, rise, riseAt = foreign_rise(ctx, stored, said, half, used[dim] - pending[dim])
      local new = {
        lim = said.limit,
        rem = said.remaining,
        at = ctx.now,
        seen = used[dim] + left[dim] - pending[dim] - late[dim],
        gone = left[dim],
        drop = 0,
        fmin = fmin,
        rise = rise,
        riseAt = riseAt,
      }
      if not stands(ctx, scope, dim, new, sent, used[dim], left[dim]) then
        for _, part in ipairs(VIEW_PARTS) do
          write(field .. '|' .. part, new[part])
        end
        write(field .. '|sent', sent)
        ctx.views[field] = new
      else
        for _, part in ipairs({ 'fmin', 'rise', 'riseAt' }) do
          write(field .. '|' .. part, new[part])
          stored[part] = new[part]
        end
      end
      -- A refusal's reset dates from the provider's last admission, not this call's.
      if not reading.refused then
        shape = shape_says(ctx, said, half, ctx.now - sent) or shape
      end
    end
  end
  mark_read(ctx, reading.id)
  if step > 0 then
    write(scope .. '|step', step)
    write(scope .. '|rg', roundingGcd)
    known.step, known.rg = step, roundingGcd
  end
  if shape then
    write(scope .. '|shape', shape)
    known.shape = shape
  end
  if #writes > 0 then
    redis.call('HSET', ctx.view, unpack(writes))
  end
end
