--[[
  Extends the lease of a call in flight: its concurrency slot, and its open reservation's stamp
  when the response has not begun yet.

  Input:
    KEYS[1] log    ZSET reservation id -> stamp ms
    KEYS[2] res    HASH reservation id -> "req|in|out|flags|scopes"
    KEYS[3] slots  ZSET reservation id -> lease expiry ms
    ARGV[1] msgpack map: now (ms; absent for Redis TIME), id (reservation id), leaseMs

  Output: the new lease expiry, or 0 when the lease was already lost
]]
--- @include "args"
--- @include "reservation"

local now = now_ms(args.now)
local id = args.id
local lease = tonumber(redis.call('ZSCORE', KEYS[3], id) or '0')
if lease <= now then return 0 end
local expiry = now + args.leaseMs
redis.call('ZADD', KEYS[3], expiry, id)
local enc = redis.call('HGET', KEYS[2], id)
if enc and decode(enc).flags ~= 's' then redis.call('ZADD', KEYS[1], 'GT', expiry, id) end
return expiry
