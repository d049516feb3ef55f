--[[
  Takes the provider's word about what is left. When the provider reports less room than the
  window believes (another client spends from the same key), the difference counts as foreign
  spend until the provider's reset time (at most one window).

  Our spend is what is inside the window now: what has left it is dropped first, or a call the
  window no longer holds would pass for ours and hide the same amount of another client's. Calls
  still on their way (admitted here, no response begun) are left out too: the provider has not
  counted them yet, and counting them as ours would hide as much of another client's spend.

  Input:
    KEYS[1] tot    HASH "scope|dim" -> spend inside the window
    KEYS[2] ext    HASH "scope|dim" -> foreign spend, "scope|dim|until" -> when it lapses
    KEYS[3] stats  HASH counters
    KEYS[4] log    ZSET reservation id -> stamp ms
    KEYS[5] res    HASH reservation id -> "req|in|out|flags|scopes"
    ARGV[1] now ms, or '' for Redis TIME
    ARGV[2] window ms
    ARGV[3] scope
    ARGV[4..] per dimension (req, in, out, tok): provider limit, remaining, reset ms
              (-1 where the header was absent)

  Output: {foreign req, foreign in, foreign out, foreign tok} as now recorded
]]
--- @include "reservations"

local now = now_ms(ARGV[1])
local windowMs = tonumber(ARGV[2])
local scope = ARGV[3]
expire_log(KEYS[4], KEYS[5], KEYS[1], now, windowMs)

-- Open reservations (stamped at a future lease expiry) whose response has not begun.
local unseen = { req = 0, ['in'] = 0, out = 0, tok = 0 }
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. now, '+inf')) do
  local enc = redis.call('HGET', KEYS[5], id)
  if enc then
    local r = decode(enc)
    if r.flags == '' then
      for _, s in ipairs(r.scopes) do
        if s == scope then
          for _, d in ipairs(DIMS) do unseen[d] = unseen[d] + amount(r, d) end
          break
        end
      end
    end
  end
end

local out = {}
for i, d in ipairs(DIMS) do
  local b = 3 + (i - 1) * 3
  local limit, remaining, reset = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local field = scope .. '|' .. d
  local foreign = 0
  if limit >= 0 and remaining >= 0 then
    local used = tonumber(redis.call('HGET', KEYS[1], field) or '0') - unseen[d]
    foreign = (limit - remaining) - used
    if foreign > 0 then
      local untilMs = now + windowMs
      if reset > now and reset < untilMs then untilMs = reset end
      redis.call('HSET', KEYS[2], field, foreign, field .. '|until', untilMs)
      redis.call('HINCRBY', KEYS[3], 'observed_foreign', 1)
    else
      foreign = 0
      redis.call('HDEL', KEYS[2], field, field .. '|until')
    end
  end
  out[i] = foreign
end
return out
