--[[
  Leaves the line without being admitted (the caller gave up or was aborted).

  Input:
    KEYS[1] waiters  ZSET ticket -> rank
    KEYS[2] waitexp  ZSET ticket -> heartbeat expiry
    ARGV[1] msgpack map: ticket

  Output: 1 when the ticket was in line, else 0
]]
--- @include "args"

redis.call('ZREM', KEYS[2], args.ticket)
return redis.call('ZREM', KEYS[1], args.ticket)
