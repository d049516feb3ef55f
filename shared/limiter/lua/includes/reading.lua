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

-- The calls logged after `since` (ids, reservations decoded, scores), at most SCAN of them.
local function logged_after(ctx, since)
  local entries =
    redis.call('ZRANGEBYSCORE', ctx.log, '(' .. since, '+inf', 'WITHSCORES', 'LIMIT', 0, SCAN)
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
  return { since = since, ids = ids, scores = scores, reservations = reservations, index = index }
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

-- Our spend in `scope` the reading of call `id`, sent at `since`, may not have counted: `pending`,
-- calls not begun (under 'produced', output still to come), and `late`, calls begun after it was
-- sent that brought no reading (the provider may have admitted them after it; one begun by then
-- it admitted before). A begun call that brought a reading was admitted before the newest
-- reading held, which the stored one is at most (see `stands`). Its own call it counted. A scan
-- cut short takes our whole spend past what it read as not counted.
local function uncounted(ctx, scope, since, id, used)
  local pending = { req = 0, ['in'] = 0, out = 0, tok = 0 }
  local late = { req = 0, ['in'] = 0, out = 0, tok = 0 }
  local logged = logged_since(ctx, since)
  local seen = 0
  local scanned = { req = 0, ['in'] = 0, out = 0, tok = 0 }
  for i, logId in ipairs(logged.ids) do
    local after = logged.scores[i] > since
    if after then
      seen = seen + 1
    end
    local reservation = after and logged.reservations[i]
    local own = logId == id or logId == id .. ':in'
    if reservation and in_scope(reservation, scope) then
      for _, dim in ipairs(DIMS) do
        scanned[dim] = scanned[dim] + amount(reservation, dim)
      end
      local stamped = reservation.flags == 's'
      if not (own and stamped) and not (stamped and reservation.read) then
        local sums = stamped and late or pending
        for _, dim in ipairs(DIMS) do
          sums[dim] = sums[dim] + amount(reservation, dim)
        end
      end
    end
  end
  if seen == SCAN then
    for _, dim in ipairs(DIMS) do
      pending[dim] = pending[dim] + math.max(0, used[dim] - scanned[dim])
    end
  end
  return pending, late
end

-- Marks call `id` as one that brought a reading (its stamped entry), in the run's shared read
-- of the log too.
local function mark_read(ctx, id)
  for _, key in ipairs({ id, id .. ':in' }) do
    local enc = redis.call('HGET', ctx.res, key)
    local reservation = enc and decode(enc)
    if reservation and reservation.flags == 's' then
      reservation.read = true
      redis.call('HSET', ctx.res, key, encode(reservation))
    end
  end
  for _, key in ipairs(ctx.logged and { id, id .. ':in' } or {}) do
    local reservation = ctx.logged.reservations[ctx.logged.index[key] or 0]
    if reservation and reservation.flags == 's' then
      reservation.read = true
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
-- have admitted them after it, so no projection takes them as counted.
local function store_reading(ctx, reading)
  local scope = reading.scope
  local sent = reading_sent(ctx, reading)
  local used, left = {}, {}
  for _, dim in ipairs(DIMS) do
    used[dim], left[dim] = window_use(ctx, scope .. '|' .. dim)
  end
  local pending, late = uncounted(ctx, scope, sent, reading.id, used)
  local storedGcd = tonumber(redis.call('HGET', ctx.view, scope .. '|rg') or '0')
  local step, roundingGcd = rounding_of(reading, storedGcd)
  local shape = nil
  ctx.views, ctx.shapes = {}, {}
  for _, dim in ipairs(DIMS) do
    local said = reading.dims[dim]
    if said then
      local field = scope .. '|' .. dim
      local half = dim ~= 'req' and math.floor(step / 2) or 0
      local new = {
        lim = said.limit,
        rem = said.remaining,
        at = ctx.now,
        seen = used[dim] + left[dim] - pending[dim] - late[dim],
        gone = left[dim],
        drop = 0,
      }
      if not stands(ctx, scope, dim, new, sent, used[dim], left[dim]) then
        redis.call(
          'HSET',
          ctx.view,
          field .. '|lim',
          new.lim,
          field .. '|rem',
          new.rem,
          field .. '|at',
          new.at,
          field .. '|seen',
          new.seen,
          field .. '|gone',
          new.gone,
          field .. '|drop',
          new.drop,
          field .. '|sent',
          sent
        )
      end
      -- A refusal's reset dates from the provider's last admission, not this call's.
      if not reading.refused then
        shape = shape_says(ctx, said, half, ctx.now - sent) or shape
      end
    end
  end
  mark_read(ctx, reading.id)
  if step > 0 then
    redis.call('HSET', ctx.view, scope .. '|step', step, scope .. '|rg', roundingGcd)
  end
  if shape then
    redis.call('HSET', ctx.view, scope .. '|shape', shape)
  end
end
