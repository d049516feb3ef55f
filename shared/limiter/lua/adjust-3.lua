--[[
  Changes an open reservation's tokens (the job taken costs no more), not its stamp or slot.
  KEYS[1] res (KEYS as in acquire-14.lua)
  KEYS[2] tot
  KEYS[3] stats
  ARGV[1] msgpack: dims, id, input, output (the new token counts)
  Output: 1 adjusted, 0 unknown reservation
]]
--- @include "args"
--- @include "reservation"

local enc = redis.call('HGET', KEYS[1], args.id)
if not enc then
  return 0
end
local r = decode(enc)
local dIn, dOut = args.input - r.inp, args.output - r.out
local t = {}
add_spend(t, { req = 0, inp = dIn, out = dOut, scopes = r.scopes }, 1)
flush(t, KEYS[2])
r.inp = r.inp + dIn
r.out = r.out + dOut
redis.call('HSET', KEYS[1], args.id, encode(r))
redis.call('HINCRBY', KEYS[3], 'reserved_in', dIn)
redis.call('HINCRBY', KEYS[3], 'reserved_out', dOut)
return 1
