-- The provider's view (docs/limiter.md), per "scope|dim": `|lim` its limit, `|rem` its remaining
-- as read, `|at` when read, `|seen` our spend it counted (window sum + left − pending − late),
-- `|gone` our left then, `|drop` what it counted that had left the provider's window before it
-- (expiry.lua), `|sent` when its call was sent; per scope `|shape` ('b' bucket, 'w' window) and `|step` (its rounding).

-- The stored reading of `field`, or false (read once a run).
local function view_of(ctx, field)
  if ctx.views[field] == nil then
    local prefix = field .. '|'
    local values = redis.call(
      'HMGET',
      ctx.view,
      prefix .. 'lim',
      prefix .. 'rem',
      prefix .. 'at',
      prefix .. 'seen',
      prefix .. 'gone',
      prefix .. 'drop'
    )
    ctx.views[field] = values[1]
        and {
          lim = tonumber(values[1]),
          rem = tonumber(values[2]),
          at = tonumber(values[3]),
          seen = tonumber(values[4]),
          gone = tonumber(values[5]),
          drop = tonumber(values[6] or '0'),
        }
      or false
  end
  return ctx.views[field]
end

-- The scope's shape ('b', 'w' or '') and half its rounding step (token dimensions only).
local function shape_of(ctx, scope, dim)
  if not ctx.shapes[scope] then
    local values = redis.call('HMGET', ctx.view, scope .. '|shape', scope .. '|step')
    ctx.shapes[scope] = { values[1] or '', math.floor(tonumber(values[2] or '0') / 2) }
  end
  local shape, half = ctx.shapes[scope][1], ctx.shapes[scope][2]
  return shape, dim == 'req' and 0 or half
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
