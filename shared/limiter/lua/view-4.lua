--[[
  Reads each scope's use and the provider's projected room now, writing nothing (what has left
  the window but is not dropped yet is left out here). The projection is view.lua's, the one
  acquire uses.

  KEYS: 1 log, 2 res, 3 tot, 4 view (as acquire-12.lua)
  ARGV[1] msgpack: dims, now (absent: TIME), windowMs, scopes (names)
  Output: JSON { now, scopes = { [name] = { shape, step, dims = { [dim] = { used, left,
    limit (the provider's, or absent), room (projected now, or absent), at (the reading's) } } } } }
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
    local room = projected(ctx, scope, v, used, left)
    dims[d] = { used = used, left = left, limit = v and v.lim or nil, room = room, at = v and v.at or nil }
  end
  out.scopes[scope] = { shape = shape_of(ctx, scope),
    step = tonumber(redis.call('HGET', KEYS[4], scope .. '|step') or '0'), dims = dims }
end
return cjson.encode(out)
