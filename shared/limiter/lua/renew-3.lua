--[[
  Extends the lease of a call in flight: its concurrency slot, and its open reservation's stamp
  when the response has not begun yet.

  Input:
    KEYS[1] log    ZSET reservation id -> stamp ms
    KEYS[2] res    HASH reservation id -> "req|in|out|flags|scopes"
    KEYS[3] slots  ZSET reservation id -> lease expiry ms
    ARGV[1] now ms, or '' for Redis TIME
    ARGV[2] reservation id
    ARGV[3] lease ms

  Output: the new lease expiry, or 0 when the lease was already lost
]]
--- @include "reservations"

local now = now_ms(ARGV[1])
local id = ARGV[2]
if not redis.call('ZSCORE', KEYS[3], id) then return 0 end
local expiry = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[3], expiry, id)
local enc = redis.call('HGET', KEYS[2], id)
if enc and decode(enc).flags ~= 's' then redis.call('ZADD', KEYS[1], 'GT', expiry, id) end
return expiry
