--[[
  Sets the one pause every worker of the limiter obeys: the later of the current and the new.

  Input:
    KEYS[1] pause  STRING until ms
    ARGV[1] msgpack map: now (ms; absent for Redis TIME), ms (pause length from now)

  Output: the pause's end (ms), which may be later than asked when one was already longer
]]
--- @include "args"
--- @include "reservation"

local now = now_ms(args.now)
local untilMs = now + args.ms
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current >= untilMs then return current end
-- The value decides; the expiry only collects the key, a minute after the pause ends, so a
-- `now` that is not Redis's own clock (an injected one) cannot lose the pause early.
redis.call('SET', KEYS[1], untilMs, 'PX', math.max(untilMs - now, 1) + 60000)
return untilMs
