--[[
  Reads each scope's use and the provider's projected room now (view.lua's, as acquire), writing
  nothing: what left the window but is not dropped yet is left out here.
  KEYS[1] log (as acquire-12.lua)
  KEYS[2] res
  KEYS[3] tot
  KEYS[4] view
  ARGV[1] msgpack: dims, now (absent: TIME), windowMs, scopes (names)
  Output: JSON { now, scopes = { [name] = { shape, step, dims = { [dim] = { used, limit (the
    provider's, or absent), room (projected now, or absent) } } } } }
]]
--- @include "args"
--- @include "reservation"
--- @include "view"

local now = now_ms(args.now)
local ctx = { tot = KEYS[3], view = KEYS[4], now = now, windowMs = args.windowMs, views = {}, shapes = {} }
local gone = {}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - args.windowMs, 'LIMIT', 0, 5000)
if #ids > 0 then
  for _, enc in ipairs(redis.call('HMGET', KEYS[2], unpack(ids))) do
    if enc then add_spend(gone, decode(enc), 1) end
  end
end
local out = { now = now, scopes = {} }
for _, scope in ipairs(args.scopes) do
  local dims = {}
  for _, d in ipairs(DIMS) do
    local f = scope .. '|' .. d
    local e = redis.call('HMGET', KEYS[3], f, f .. '|left')
    local used = tonumber(e[1] or '0') - (gone[f] or 0)
    local left = tonumber(e[2] or '0') + (gone[f] or 0)
    local v = view_of(ctx, f)
    dims[d] = { used = used, limit = v and v.lim or nil, room = projected(ctx, scope, d, v, used, left) }
  end
  local shape, half = shape_of(ctx, scope, 'tok')
  out.scopes[scope] = { shape = shape, step = half * 2, dims = dims }
end
return cjson.encode(out)
