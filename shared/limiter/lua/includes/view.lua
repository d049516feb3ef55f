-- The provider's view (docs/limiter.md), per "scope|dim": `|lim` its limit, `|rem` its remaining
-- as read, `|at` when read, `|seen` our spend it counted (window sum + left − pending − late),
-- `|gone` our left then; per scope `|shape` ('b' bucket, 'w' window) and `|step` (its rounding).

-- The stored reading of `field`, or false (read once a run).
local function view_of(ctx, field)
  if ctx.views[field] == nil then
    local f = field .. '|'
    local e =
      redis.call('HMGET', ctx.view, f .. 'lim', f .. 'rem', f .. 'at', f .. 'seen', f .. 'gone')
    ctx.views[field] = e[1]
        and {
          lim = tonumber(e[1]),
          rem = tonumber(e[2]),
          at = tonumber(e[3]),
          seen = tonumber(e[4]),
          gone = tonumber(e[5]),
        }
      or false
  end
  return ctx.views[field]
end

-- The scope's shape ('b', 'w' or '') and half its rounding step (token dimensions only).
local function shape_of(ctx, scope, d)
  if not ctx.shapes[scope] then
    local e = redis.call('HMGET', ctx.view, scope .. '|shape', scope .. '|step')
    ctx.shapes[scope] = { e[1] or '', math.floor(tonumber(e[2] or '0') / 2) }
  end
  return ctx.shapes[scope][1], d == 'req' and 0 or ctx.shapes[scope][2]
end

-- The provider's room in d by reading v (our `used`, `left`), its refill per ms (0: a window);
-- nil once v is a window old. A reading counts at the low end of its rounding.
local function projected(ctx, scope, d, v, used, left)
  if not v or ctx.now >= v.at + ctx.windowMs then
    return nil, 0
  end
  local shape, half = shape_of(ctx, scope, d)
  if shape == 'b' then
    local rate = v.lim / ctx.windowMs
    return math.min(v.lim, v.rem - half + rate * (ctx.now - v.at)) - (used + left - v.seen), rate
  end
  local ours = v.seen - v.gone
  return math.min(v.lim, v.rem - half + ours) - used, 0
end
