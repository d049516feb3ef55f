--[[
  Leaves the line without being admitted (the caller gave up or was aborted).
  KEYS[1] waiters (as in acquire-13.lua)
  KEYS[2] waitexp
  ARGV[1] msgpack: ticket
  Output: 1 when the ticket was in line, else 0
]]
--- @include "args"

redis.call('ZREM', KEYS[2], args.ticket)
return redis.call('ZREM', KEYS[1], args.ticket)
