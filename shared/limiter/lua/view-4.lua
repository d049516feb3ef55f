--[[
  Reads each scope's use, the provider's projected room and the room a call has there now, by
  the admission's own rule (admission.lua's room_of: cap less headroom, bucket cover, the
  provider's room less its headroom), writing nothing: what left the window but is not dropped
  yet is left out here, as acquire drops it first.
  KEYS[1] log (as acquire-14.lua)
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
--- @include "view"
--- @include "admission"

local now = now_ms(args.now)
local run = {
  log = KEYS[1],
  res = KEYS[2],
  tot = KEYS[3],
  view = KEYS[4],
  now = now,
  windowMs = args.windowMs,
  headroom = args.headroom or 0,
  scopes = args.scopes,
  totals = {},
  own = {},
  views = {},
  shapes = {},
}

-- What left the window, not dropped yet, per "scope|dim".
local gone = {}
local ids = redis.call('ZRANGEBYSCORE', run.log, '-inf', now - args.windowMs, 'LIMIT', 0, 5000)
if #ids > 0 then
  for _, enc in ipairs(redis.call('HMGET', run.res, unpack(ids))) do
    if enc then
      add_spend(gone, decode(enc), 1)
    end
  end
end

-- A number JSON can carry: nil for none or no bound.
local function finite(x)
  if x and x ~= math.huge then
    return x
  end
end

local out = { now = now, scopes = {} }
for _, s in ipairs(args.scopes) do
  local call = { { name = s.name } }
  if args.model then
    call[2] = { name = args.model }
  end
  local dims = {}
  for _, d in ipairs(DIMS) do
    local f = s.name .. '|' .. d
    local e = redis.call('HMGET', run.tot, f, f .. '|left')
    local used = tonumber(e[1] or '0') - (gone[f] or 0)
    local left = tonumber(e[2] or '0') + (gone[f] or 0)
    run.own[f] = { used, left }
    local v = view_of(run, f)
    local lim, _, most = limit_of(run, s, d)
    dims[d] = {
      used = used,
      limit = v and v.lim or nil,
      room = projected(run, s.name, d, v, used, left),
      fit = finite(room_of(run, s, d, { limits = call })),
      most = lim > 0 and most or nil,
    }
  end
  local shape, half = shape_of(run, s.name, 'tok')
  out.scopes[s.name] = { shape = shape, step = half * 2, dims = dims }
end
return cjson.encode(out)
