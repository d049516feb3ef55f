--[[
  Puts waiting jobs where BullMQ's moveToActive takes its next job from (the tail of the plain
  wait list, served before the prioritized set), so that the next moveToActive calls hand out
  exactly these jobs: the gate's backfill takes jobs from behind the head this way. Their
  `priority` field is left as it is, so a retry later goes back to its own place. A job that is
  no longer waiting (another worker took it) is left alone.

  Input:
    KEYS[1] wait         LIST
    KEYS[2] prioritized  ZSET priority * 2^32 + counter
    ARGV[1..] job ids, in the order they should be handed out

  Output: the ids moved, in that order
]]
local moved = {}
-- moveToActive pops from the tail: push the last one first, so the first one is popped first.
for i = #ARGV, 1, -1 do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[2], id) == 1 or redis.call('LREM', KEYS[1], 1, id) == 1 then
    redis.call('RPUSH', KEYS[1], id)
    table.insert(moved, 1, id)
  end
end
return moved
