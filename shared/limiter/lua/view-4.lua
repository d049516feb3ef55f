--[[
  Reads each scope's use, the provider's projected room and the room a call has there now, by
  the admission's own rule (admission.lua's room_of: cap less headroom, bucket cover, the
  provider's room less its headroom), writing nothing: what left the window but is not dropped
  yet is left out here, as acquire drops it first.
  KEYS[1] log (as acquire-13.lua)
  KEYS[2] res
  KEYS[3] tot
  KEYS[4] view
  ARGV[1] msgpack: dims, now (absent: TIME), windowMs, headroom, scopes ({ name, limits,
    unknown } as acquire's), model (the model scope a call is charged to, whose fresh bucket may
    cover another scope's; absent: each scope's own reading only)
  Output: JSON { now, scopes = { [name] = { shape, step, dims = { [dim] = { used, limit (the
    provider's, or absent), room (the provider's, projected now, or absent), fit (what a call
    may take now, or absent: nothing limits it), most (the cap less headroom, or absent) } } } } }
]]
--- @include "args"
--- @include "reservation"
--- @include "money"
--- @include "expiry"
--- @include "view"
--- @include "admission"

local now = now_ms(args.now)
local run = with_caches({
  log = KEYS[1],
  res = KEYS[2],
  tot = KEYS[3],
  view = KEYS[4],
  now = now,
  windowMs = args.windowMs,
  headroom = args.headroom or 0,
  scopes = args.scopes,
})

-- What left the window but is not dropped yet, as expire_log would drop it (a view writes
-- nothing): its spend is left out of the window's use, its `drops` go to the readings.
local _, gone, drops = window_leavers(run, now, args.windowMs, LEAVERS_A_RUN)
for field, by in pairs(drops) do
  local reading = view_of(run, field)
  reading.drop = reading.drop + by
end

-- A number JSON can carry: nil for none or no bound.
local function finite(value)
  if value and value ~= math.huge then
    return value
  end
end

-- One dimension of a scope: acquire's own functions read it (our window sum less what is gone,
-- limit_of, projected, room_of), so the view and the admission never disagree. `summed` and
-- `leftSummed`: the scope's sums as stored (tot_of).
local function read_dim(scope, dim, callScopes, summed, leftSummed)
  local field = scope.name .. '|' .. dim
  local notDropped = gone[field] or 0
  local used, left = summed - notDropped, leftSummed + notDropped
  run.own[field] = { used, left }
  local reading = view_of(run, field)
  local limit, _, most = limit_of(run, scope, dim)
  return {
    used = used,
    limit = reading and reading.lim or nil,
    room = projected(run, scope.name, dim, reading, used, left),
    fit = finite(room_of(run, scope, dim, { limits = callScopes })),
    most = limit > 0 and most or nil,
  }
end

local out = { now = now, scopes = {} }
for _, scope in ipairs(args.scopes) do
  -- The scopes a call here is charged to: this one, and the model's (its bucket may cover it).
  local callScopes = { { name = scope.name } }
  if args.model then
    callScopes[2] = { name = args.model }
  end
  local dims = {}
  local used, left = tot_of(run, scope.name)
  for _, dim in ipairs(DIMS) do
    dims[dim] = read_dim(scope, dim, callScopes, used[dim], left[dim])
  end
  local shape, half = shape_of(run, scope.name, 'tok')
  out.scopes[scope.name] = { shape = shape, step = half * 2, dims = dims }
end
return cjson.encode(out)
