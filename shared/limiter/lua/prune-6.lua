--[[
  Drops what has left the window and the leases that ran out (giving back the money they
  held), so a snapshot reads current totals even when nobody acquired lately.

  Input:
    KEYS[1] log    ZSET reservation id -> stamp ms
    KEYS[2] res    HASH reservation id -> "req|in|out|flags|scopes"
    KEYS[3] slots  ZSET reservation id -> lease expiry ms
    KEYS[4] tot    HASH "scope|dim" -> spend inside the window
    KEYS[5] spend  HASH "<period id>|<budget or model:name>" -> µ$ spent
    KEYS[6] held   HASH reservation id -> the money it holds
    ARGV[1] msgpack map: dims, now (ms; absent for Redis TIME), windowMs

  Output: {now (ms), reservations dropped}; at most 500 a call, so call again while it
          drops 500
]]
--- @include "args"
--- @include "reservation"
--- @include "tally"
--- @include "money"
--- @include "expiry"

local now = now_ms(args.now)
expire_slots(KEYS[3], now, { spend = KEYS[5], held = KEYS[6] })
local dropped = expire_log(KEYS[1], KEYS[2], KEYS[4], now, args.windowMs)
return { now, dropped }
