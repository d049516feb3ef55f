--[[
  Extends a call's lease: its slot, its open reservation's stamp until its response begins, and
  its place among its scopes' calls awaiting a first answer (reservation.lua's awaiting_key).
  KEYS[1] log (KEYS as in acquire-13.lua)
  KEYS[2] res
  KEYS[3] slots
  KEYS[4] tot
  ARGV[1] msgpack: now (absent: TIME), id, leaseMs, windowMs
  Output: the new lease expiry, or 0 when the lease was already lost
]]
--- @include "args"
--- @include "reservation"
--- @include "window-keys"

local logKey, resKey, slotsKey, totKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms(args.now)
local id = args.id
local lease = tonumber(redis.call('ZSCORE', slotsKey, id) or '0')
if lease <= now then
  return 0
end
local expiry = now + args.leaseMs
redis.call('ZADD', slotsKey, expiry, id)
local reservation = redis.call('HGET', resKey, id)
reservation = reservation and decode(reservation)
if reservation and reservation.flags ~= 's' then
  redis.call('ZADD', logKey, 'GT', expiry, id)
  keep_window(logKey, resKey, totKey, now, args.windowMs)
end
-- Still waiting for its first answer: it stays among its scopes' awaiting calls.
if reservation and reservation.awaiting then
  for _, scope in ipairs(reservation.scopes) do
    keep_awaiting(slotsKey, scope, id, expiry, now, true)
  end
end
return expiry
