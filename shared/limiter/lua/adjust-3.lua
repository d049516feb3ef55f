--[[
  Changes an open reservation's tokens (the job taken costs no more), not its stamp or slot.
  KEYS[1] res (KEYS as in acquire-13.lua)
  KEYS[2] tot
  KEYS[3] stats
  ARGV[1] msgpack: dims, id, input, output (the new token counts)
  Output: 1 adjusted, 0 unknown reservation
]]
--- @include "args"
--- @include "reservation"

local resKey, totKey, statsKey = KEYS[1], KEYS[2], KEYS[3]
local enc = redis.call('HGET', resKey, args.id)
if not enc then
  return 0
end
local reservation = decode(enc)
local dIn, dOut = args.input - reservation.inp, args.output - reservation.out
local sums = {}
local delta = {
  req = 0,
  inp = dIn,
  out = dOut,
  flags = reservation.flags,
  summed = reservation.summed,
  scopes = reservation.scopes,
}
add_spend(sums, delta, 1)
add_open(sums, delta, 1)
flush(sums, totKey)
reservation.inp = reservation.inp + dIn
reservation.out = reservation.out + dOut
redis.call('HSET', resKey, args.id, encode(reservation))
redis.call('HINCRBY', statsKey, 'reserved_in', dIn)
redis.call('HINCRBY', statsKey, 'reserved_out', dOut)
return 1
