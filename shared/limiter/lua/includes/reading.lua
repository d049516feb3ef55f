-- Storing a provider's reading in the view (see view.lua). Needs "reservation", "view".
local function gcd(a, b)
  while b > 0 do
    a, b = b, a % b
  end
  return a
end

-- What reading r says of the shape: 'b' when its reset is when a bucket would be full, well
-- before a window; 'w' at a window or later; nil when both or neither fit. `slack`: the reset's
-- resolution (a second), the rounding, the reading's age.
local function shape_says(ctx, r, half, ageMs)
  if not r.reset or r.reset <= 0 or r.limit <= 0 then
    return nil
  end
  local slack = 1000 + 2 * half * ctx.windowMs / r.limit + ageMs
  local untilReset = r.reset - (ctx.now - ageMs)
  local bucket = math.abs(untilReset - (r.limit - r.remaining) * ctx.windowMs / r.limit) <= slack
  local window = untilReset >= ctx.windowMs - slack
  if bucket ~= window then
    return bucket and 'b' or 'w'
  end
end

-- Our spend in `scope` the reading of call `id`, sent at `since`, may not have counted: `pending`,
-- calls not begun (under 'produced', output still to come), and `late`, calls begun after it was
-- sent that brought no reading (the provider may have admitted them after it; one begun by then
-- it admitted before). A begun call that brought a reading was admitted before the newest
-- reading held, which the stored one is at most (see `stands`). Its own call it counted. A scan
-- cut short takes our whole spend past what it read as not counted.
local SCAN = 2000
local function uncounted(ctx, scope, since, id, used)
  local p, late =
    { req = 0, ['in'] = 0, out = 0, tok = 0 }, { req = 0, ['in'] = 0, out = 0, tok = 0 }
  local ids = redis.call('ZRANGEBYSCORE', ctx.log, '(' .. since, '+inf', 'LIMIT', 0, SCAN)
  if #ids == 0 then
    return p, late
  end
  local scanned = { req = 0, ['in'] = 0, out = 0, tok = 0 }
  for i, enc in ipairs(redis.call('HMGET', ctx.res, unpack(ids))) do
    local r = enc and decode(enc)
    local own = ids[i] == id or ids[i] == id .. ':in'
    if r and in_scope(r, scope) then
      for _, d in ipairs(DIMS) do
        scanned[d] = scanned[d] + amount(r, d)
      end
      if not (own and r.flags == 's') and not (r.flags == 's' and r.read) then
        local t = r.flags == 's' and late or p
        for _, d in ipairs(DIMS) do
          t[d] = t[d] + amount(r, d)
        end
      end
    end
  end
  if #ids == SCAN then
    for _, d in ipairs(DIMS) do
      p[d] = p[d] + math.max(0, used[d] - scanned[d])
    end
  end
  return p, late
end

-- Marks call `id` as one that brought a reading (its stamped entry).
local function mark_read(ctx, id)
  for _, key in ipairs({ id, id .. ':in' }) do
    local enc = redis.call('HGET', ctx.res, key)
    local r = enc and decode(enc)
    if r and r.flags == 's' then
      r.read = true
      redis.call('HSET', ctx.res, key, encode(r))
    end
  end
end

-- Whether the stored reading of scope, d stands against `new`: readings of calls in flight
-- together (the stored one recorded after the moment new's call was sent) were taken in an order we cannot
-- see, and another client may have spent between them; each projection is the room if nobody
-- else spent since its own reading, so the one that leaves less room stands.
local function stands(ctx, scope, d, new, since, used, left)
  local v = view_of(ctx, scope .. '|' .. d)
  if not v or v.at <= since or v.lim ~= new.lim then
    return false
  end
  local old = projected(ctx, scope, d, v, used, left)
  return old ~= nil and old < projected(ctx, scope, d, new, used, left)
end

-- Stores reading g = { scope, id, ageMs, dims = { [d] = { limit, remaining, reset } } } of call
-- id, sent ageMs ago. `seen` leaves out the calls begun since it was sent: the provider may have
-- admitted them after it, so no projection takes them as counted.
local function store_reading(ctx, g)
  local scope, ageMs = g.scope, math.max(0, math.min(g.ageMs or 0, ctx.windowMs))
  local used = {}
  for _, d in ipairs(DIMS) do
    used[d] = tonumber(redis.call('HGET', ctx.tot, scope .. '|' .. d) or '0')
  end
  local pending, late = uncounted(ctx, scope, ctx.now - ageMs, g.id, used)
  -- The rounding step divides every rounded reading (a limit need not): `|rg` is their gcd,
  -- negative while one value was read (the limit stands in for a second).
  local rg, lim = tonumber(redis.call('HGET', ctx.view, scope .. '|rg') or '0'), 0
  for _, d in ipairs(DIMS) do
    local r = g.dims[d]
    if r and d ~= 'req' and r.remaining > 0 then
      rg = (rg == 0 or rg == -r.remaining) and -r.remaining or gcd(math.abs(rg), r.remaining)
      lim = r.limit
    end
  end
  local step = rg < 0 and gcd(lim, -rg) or rg
  local shape = nil
  ctx.views, ctx.shapes = {}, {}
  for _, d in ipairs(DIMS) do
    local r = g.dims[d]
    if r then
      local field = scope .. '|' .. d
      local half = d ~= 'req' and math.floor(step / 2) or 0
      local e = redis.call('HMGET', ctx.tot, field, field .. '|left')
      local used, left = tonumber(e[1] or '0'), tonumber(e[2] or '0')
      local new = {
        lim = r.limit,
        rem = r.remaining,
        at = ctx.now,
        seen = used + left - pending[d] - late[d],
        gone = left,
      }
      if not stands(ctx, scope, d, new, ctx.now - ageMs, used, left) then
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
          new.gone
        )
      end
      -- A refusal's reset dates from the provider's last admission, not this call's.
      if not g.refused then
        shape = shape_says(ctx, r, half, ageMs) or shape
      end
    end
  end
  mark_read(ctx, g.id)
  if step > 0 then
    redis.call('HSET', ctx.view, scope .. '|step', step, scope .. '|rg', rg)
  end
  if shape then
    redis.call('HSET', ctx.view, scope .. '|shape', shape)
  end
end
