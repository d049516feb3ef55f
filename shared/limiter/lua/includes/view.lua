-- The provider's view (docs/limiter.md). The view hash holds, per field "scope|dim": `|lim` the
-- provider's limit, `|rem` its remaining less half the rounding step, `|at` when read, `|seen`
-- our spend it had counted (window sum + left − pending), `|gone` our left then; per scope
-- `|shape` ('b' bucket, 'w' window) and `|step` (rounding). `ctx`: keys (tot, view, log, res),
-- now, windowMs and caches (views, shapes).

-- The stored reading of `field`, or false (read once a run).
local function view_of(ctx, field)
  local v = ctx.views[field]
  if v == nil then
    local e = redis.call('HMGET', ctx.view, field .. '|lim', field .. '|rem', field .. '|at',
      field .. '|seen', field .. '|gone')
    v = e[1] and { lim = tonumber(e[1]), rem = tonumber(e[2]), at = tonumber(e[3]),
      seen = tonumber(e[4]), gone = tonumber(e[5]) } or false
    ctx.views[field] = v
  end
  return v
end

local function shape_of(ctx, scope)
  ctx.shapes[scope] = ctx.shapes[scope] or redis.call('HGET', ctx.view, scope .. '|shape') or ''
  return ctx.shapes[scope]
end

-- The provider's room now by reading v, given our window sum `used` and count `left`, and its
-- refill per ms (0: a window, whose room comes back as our entries leave); nil once v is a
-- window old (all it counted has left a window, a bucket is full).
local function projected(ctx, scope, v, used, left)
  if not v or ctx.now >= v.at + ctx.windowMs then return nil, 0 end
  if shape_of(ctx, scope) == 'b' then
    local rate = v.lim / ctx.windowMs
    return math.min(v.lim, v.rem + rate * (ctx.now - v.at)) - (used + left - v.seen), rate
  end
  return v.rem + (v.seen - v.gone) - used, 0
end
