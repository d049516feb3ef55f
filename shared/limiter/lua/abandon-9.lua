--[[
  Undoes an admission its caller never learned of: the acquire that carried this ticket gave
  up (no answer in time, the connection dropped) but may still have run, or may still run when
  Redis answers again (ioredis sends queued and unanswered commands after reconnecting). Sent
  behind that acquire on the same connection, so it runs after it. The ticket also leaves the
  line, where it would otherwise stand first until its heartbeat lapses.

  Input:
    KEYS[1] log      ZSET reservation id -> stamp ms
    KEYS[2] res      HASH reservation id -> "req|in|out|flags|scopes"
    KEYS[3] slots    ZSET reservation id -> lease expiry ms
    KEYS[4] tot      HASH "scope|dim" -> spend inside the window
    KEYS[5] stats    HASH counters
    KEYS[6] waiters  ZSET ticket -> rank
    KEYS[7] waitexp  ZSET ticket -> heartbeat expiry
    KEYS[8] spend    HASH "<period id>|<budget or model:name>" -> µ$ spent
    KEYS[9] held     HASH reservation id -> the money it holds (given back)
    ARGV[1] msgpack map: dims, ids (the acquire's ticket, then the tickets of its extras)

  Output: how many admissions were undone
]]
--- @include "args"
--- @include "reservation"
--- @include "money"
--- @include "money-end"

local undone = 0
local mk = { spend = KEYS[8], held = KEYS[9] }
for _, id in ipairs(args.ids) do
  money_settle(mk, id, 0)
  redis.call('ZREM', KEYS[6], id)
  redis.call('ZREM', KEYS[7], id)
  redis.call('ZREM', KEYS[3], id)
  local enc = redis.call('HGET', KEYS[2], id)
  if enc then
    local r = decode(enc)
    local t = {}
    add_spend(t, r, -1)
    flush(t, KEYS[4])
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[1], id)
    redis.call('HINCRBY', KEYS[5], 'admitted', -1)
    redis.call('HINCRBY', KEYS[5], 'reserved_in', 0 - r.inp)
    redis.call('HINCRBY', KEYS[5], 'reserved_out', 0 - r.out)
    redis.call('HINCRBY', KEYS[5], 'abandoned', 1)
    undone = undone + 1
  end
end
return undone
