--[[
  Stamps an open reservation when the provider's response begins: the provider has admitted
  the call by then, so the window may count it from now instead of from its lease expiry.
  Under 'actual' output accounting the provider charges output until the end, so the
  reservation stays open; it is only marked as begun ('b'), which tells `observe` that the
  provider has counted it.

  Input:
    KEYS[1] log  ZSET reservation id -> stamp ms
    KEYS[2] res  HASH reservation id -> "req|in|out|flags|scopes"
    ARGV[1] now ms, or '' for Redis TIME
    ARGV[2] reservation id
    ARGV[3] 'stamp', or 'mark' (begun, stays open)

  Output: 1 stamped or marked, 0 unknown or already done
]]
--- @include "reservations"

local now = now_ms(ARGV[1])
local enc = redis.call('HGET', KEYS[2], ARGV[2])
if not enc then return 0 end
local r = decode(enc)
if r.flags == 's' then return 0 end
if ARGV[3] == 'mark' then
  if r.flags == 'b' then return 0 end
  r.flags = 'b'
  redis.call('HSET', KEYS[2], ARGV[2], encode(r))
  return 1
end
r.flags = 's'
redis.call('HSET', KEYS[2], ARGV[2], encode(r))
redis.call('ZADD', KEYS[1], now, ARGV[2])
return 1
