--[[
  Stamps open reservations when the provider's response begins: the provider has admitted
  the call by then, so the window may count it from now instead of from its lease expiry.
  Under 'actual' output accounting the provider charges output until the end, so the output
  stays open: the request and the input, which the provider counted when it admitted the call,
  move to a part of their own (`<id>:in`) stamped now, and the rest is marked as begun ('b'),
  which tells `observe` that the provider has counted it. Several calls that began at the same
  moment go in one run.

  Input:
    KEYS[1] log  ZSET reservation id -> stamp ms
    KEYS[2] res  HASH reservation id -> "req|in|out|flags|scopes"
    ARGV[1] msgpack map: now (ms; absent for Redis TIME), mode ('stamp', or 'mark': begun,
            output stays open), ids (reservation ids)

  Output: how many were stamped or marked (unknown or already done ones are not)
]]
--- @include "args"
--- @include "reservation"

local now = now_ms(args.now)
local mode = args.mode
local done = 0
for _, id in ipairs(args.ids) do
  local enc = redis.call('HGET', KEYS[2], id)
  if enc then
    local r = decode(enc)
    if mode == 'mark' then
      if r.flags == '' then
        -- The same spend in two entries of the same scopes: the totals do not change.
        local part = { req = r.req, inp = r.inp, out = 0, flags = 's', scopes = r.scopes }
        redis.call('HSET', KEYS[2], input_part(id), encode(part))
        redis.call('ZADD', KEYS[1], now, input_part(id))
        r.req, r.inp, r.flags = 0, 0, 'b'
        redis.call('HSET', KEYS[2], id, encode(r))
        done = done + 1
      end
    elseif r.flags ~= 's' then
      r.flags = 's'
      redis.call('HSET', KEYS[2], id, encode(r))
      redis.call('ZADD', KEYS[1], now, id)
      done = done + 1
    end
  end
end
return done
