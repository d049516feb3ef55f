--[[
  Puts admitted jobs where BullMQ's moveToActive takes its next job from (the tail of the plain
  wait list, served before the prioritized set), so that the next moveToActive calls hand out
  exactly these jobs: fair share's turn order goes to the front this way. Sent in the acquire's
  transaction (worker/fetch-along.ts), or after it: only the jobs the acquire admitted go, the
  first ones given (an acquire admits in order). Their `priority` field is left as it is, so a
  retry later goes back to its own place. A job that is no longer waiting is left alone.

  Input:
    KEYS[1] wait          LIST
    KEYS[2] prioritized   ZSET priority * 2^32 + counter
    KEYS[3] reservations  HASH the limiter's: id -> reservation
    ARGV    for each job, in the order they should be handed out: the id of the reservation
            made for it ('': none, a head taken to be acted on, not run: worker/head-moves.ts),
            then its id

  Output: the ids moved, in that order
]]
local admitted = 0
local function goes(reservation)
  return reservation == '' or redis.call('HEXISTS', KEYS[3], reservation) == 1
end
while admitted * 2 + 2 <= #ARGV and goes(ARGV[admitted * 2 + 1]) do
  admitted = admitted + 1
end
local moved = {}
-- moveToActive pops from the tail: push the last one first, so the first one is popped first.
for i = admitted, 1, -1 do
  local id = ARGV[i * 2]
  if redis.call('ZREM', KEYS[2], id) == 1 or redis.call('LREM', KEYS[1], 1, id) == 1 then
    redis.call('RPUSH', KEYS[1], id)
    table.insert(moved, 1, id)
  end
end
return moved
