-- The provider's view (docs/limiter.md), per "scope|dim": `|lim` its limit, `|rem` its remaining
-- as read, `|at` when read, `|seen` our spend it counted (window sum + left − pending − late),
-- `|gone` our left then, `|drop` what it counted that had left the provider's window before it
-- (expiry.lua), `|sent` when its call was sent; per scope `|shape` ('b' bucket, 'w' window) and `|step` (its rounding).
-- Another client's spend (reading.lua): `|fmin` the least of it the last reading shows, `|rise`
-- its largest rise from one reading to the next and `|riseAt` when (it counts for a window).
-- `probes`: per scope, the call out as the probe of its last room and until when (admission.lua).

-- The parts of a stored reading, in the order view_of reads them.
local VIEW_PARTS = { 'lim', 'rem', 'at', 'seen', 'gone', 'drop', 'fmin', 'rise', 'riseAt' }

-- The stored reading of `field` ("scope|dim"), or false. A scope's dimensions are read together,
-- once a run: one HMGET a scope (none for a tenant's: no reading describes one).
local function view_of(ctx, field)
  if ctx.views[field] == nil then
    local scope = string.match(field, '^(.*)|[^|]+$')
    if not readable(scope) then
      ctx.views[field] = false
      return false
    end
    local names = {}
    for _, dim in ipairs(DIMS) do
      for _, part in ipairs(VIEW_PARTS) do
        names[#names + 1] = scope .. '|' .. dim .. '|' .. part
      end
    end
    local values = redis.call('HMGET', ctx.view, unpack(names))
    for i, dim in ipairs(DIMS) do
      local at = (i - 1) * #VIEW_PARTS
      ctx.views[scope .. '|' .. dim] = values[at + 1]
          and {
            lim = tonumber(values[at + 1]),
            rem = tonumber(values[at + 2]),
            at = tonumber(values[at + 3]),
            seen = tonumber(values[at + 4]),
            gone = tonumber(values[at + 5]),
            drop = tonumber(values[at + 6] or '0'),
            fmin = tonumber(values[at + 7] or '0'),
            rise = tonumber(values[at + 8] or '0'),
            riseAt = tonumber(values[at + 9] or '0'),
          }
        or false
    end
  end
  return ctx.views[field] or false
end

-- What the view holds of a scope's shape: `shape` ('b', 'w' or ''), its rounding `step` and the
-- gcd of its readings' values (`rg`, see reading.lua). Read once a run; a reading stored in the
-- run updates it.
local function shape_known(ctx, scope)
  if not ctx.shapes[scope] then
    local values =
      redis.call('HMGET', ctx.view, scope .. '|shape', scope .. '|step', scope .. '|rg')
    ctx.shapes[scope] = {
      shape = values[1] or '',
      step = tonumber(values[2] or '0'),
      rg = tonumber(values[3] or '0'),
    }
  end
  return ctx.shapes[scope]
end

-- The scope's shape ('b', 'w' or '') and half its rounding step (token dimensions only).
local function shape_of(ctx, scope, dim)
  local known = shape_known(ctx, scope)
  return known.shape, dim == 'req' and 0 or math.floor(known.step / 2)
end

-- The provider's room in dim by the stored reading (our `used`, `left`), its refill per ms (0: a
-- window); nil once the reading is a window old. A reading counts at the low end of its rounding.
local function projected(ctx, scope, dim, stored, used, left)
  if not stored or ctx.now >= stored.at + ctx.windowMs then
    return nil, 0
  end
  local shape, half = shape_of(ctx, scope, dim)
  if shape == 'b' then
    local rate = stored.lim / ctx.windowMs
    local refilled = stored.rem - half + rate * (ctx.now - stored.at)
    local spentSince = used + left - stored.seen
    return math.min(stored.lim, refilled) - spentSince, rate
  end
  local ours = stored.seen - stored.gone - stored.drop
  return math.min(stored.lim, stored.rem - half + ours) - used, 0
end

-- The live probes by scope ({ id, untilMs }), read once a run; `write_probes` writes them back
-- if the run changed them, without the lapsed.
local function probes_of(ctx)
  if not ctx.probes then
    local enc = redis.call('HGET', ctx.view, 'probes')
    local live = {}
    for name, probe in pairs(enc and cjson.decode(enc) or {}) do
      if probe.untilMs > ctx.now then
        live[name] = probe
      end
    end
    ctx.probes = { live = live, changed = false }
  end
  return ctx.probes
end

local function write_probes(ctx)
  if not (ctx.probes and ctx.probes.changed) then
    return
  end
  ctx.probes.changed = false
  if next(ctx.probes.live) then
    redis.call('HSET', ctx.view, 'probes', cjson.encode(ctx.probes.live))
  else
    redis.call('HDEL', ctx.view, 'probes')
  end
end

-- Ends the probes call `id` is out as (its answer began, or it ended); true if it was one.
local function end_probes(ctx, id)
  local ended = false
  for name, probe in pairs(probes_of(ctx).live) do
    if probe.id == id then
      ctx.probes.live[name] = nil
      ctx.probes.changed, ended = true, true
    end
  end
  return ended
end
