--[[
  Drops what left the window and lapsed leases (their money back): idle keys shrink to nothing.
  KEYS[1] log (as acquire-12.lua)
  KEYS[2] res
  KEYS[3] slots
  KEYS[4] tot
  KEYS[5] spend
  KEYS[6] held
  ARGV[1] msgpack: dims, now (absent: TIME), windowMs
  Output: {now (ms), reservations dropped}; at most 500 a call, so call again while it drops 500
]]
--- @include "args"
--- @include "reservation"
--- @include "money"
--- @include "money-end"
--- @include "expiry"

local now = now_ms(args.now)
expire_slots(KEYS[3], now, { spend = KEYS[5], held = KEYS[6] })
return { now, expire_log(KEYS[1], KEYS[2], KEYS[4], now, args.windowMs) }
