--[[
  Takes the provider's word about what is left. When the provider reports less room than the
  window believes (another client spends from the same key), the difference counts as foreign
  spend until the provider's reset time (at most one window).

  What was certainly another client's (counting every call of ours as counted by the provider)
  is held: the highest reading until then, even when a later one is lower, because another
  client's spend falls as its old calls leave the window just before it sends new ones, and
  taking that room at once is what collides with its next call; the highest reading since takes
  over when the held one lapses, so the estimate steps down, never to nothing at once. What may
  have been ours (calls admitted here whose response had not begun: the provider may or may not
  have counted them yet) counts only as far as the reading before agrees, and only until the
  next reading: another client's spend shows in both, our own call racing its stamp in one.

  The reading is the provider's count when it admitted the call that brought it (`ageMs` ago):
  the window is taken as it was then (what has left it since is still ours), and calls settled
  since with output given back count the output reserved, as the provider still did.

  Our spend is what is inside the window now: what has left it is dropped first, or a call the
  window no longer holds would pass for ours and hide the same amount of another client's. Calls
  still on their way (admitted here, no response begun) are left out too: the provider has not
  counted them yet, and counting them as ours would hide as much of another client's spend.
  So are calls stamped longer ago than the provider's own window, when the window has a margin
  (none by default: a stamp is never early): the provider has dropped them, and room that
  reopened there is room the other client may already have taken. What left the window after
  the reading (another script dropped it first) counts back in: expire_log keeps it as gone.

  Input:
    KEYS[1] tot    HASH "scope|dim" -> spend inside the window
    KEYS[2] ext    HASH "scope|dim" -> foreign spend held, "scope|dim|until" -> when it lapses,
                   "scope|dim|next", "scope|dim|next|until": the highest reading since,
                   "scope|dim|last", "scope|dim|last|until": the latest reading, at its highest,
                   "scope|dim|seen", "scope|dim|seen|until": the latest reading's "possibly",
                   "scope|dim|certain", "scope|dim|certain|until": its "certainly",
                   "scope|dim|rise", "scope|dim|rise|until": the largest rise of "certainly"
                   from one reading to the next, for a window,
                   "scope|dim|exact", "scope|dim|exact|until": the provider's limit, for a
                   window after an exact (not rounded) reading
    KEYS[3] stats  HASH counters
    KEYS[4] log    ZSET reservation id -> stamp ms
    KEYS[5] res    HASH reservation id -> "req|in|out|flags|scopes[|reservedOut]"
    ARGV[1] msgpack map (scripts.ts packs it):
      dims      the dimensions' short names in order
      now       ms; absent for Redis TIME
      windowMs  the window, margin included
      scope
      readings  by dimension short name: { limit, remaining, reset ms (-1 unknown), rounding
                (how far the true remaining may be above it: the provider rounds token
                readings to the nearest thousand) }; a dimension whose headers were absent is
                absent
      of        the reservation whose response brought the reading, or ''
      channel   to SPUBLISH on (it carries the queue's hash tag) when the reading is a probe's (waiters wake), or ''
      marginMs  the margin included in windowMs: the provider's window is the rest
      ageMs     how long before now the provider took the reading (0: now)

  Output: {foreign req, foreign in, foreign out, foreign tok} as now counted
]]
--- @include "args"
--- @include "reservation"
--- @include "tally"
--- @include "expiry"
--- @include "foreign-spend"

local now = now_ms(args.now)
local windowMs = args.windowMs
local scope = args.scope
-- The reading's own moment: the provider computed it when it admitted the call that brought
-- it, maybe long before its response arrived (a whole call, unstreamed).
local readAt = now - math.max(0, math.min(args.ageMs or 0, windowMs))
expire_log(KEYS[4], KEYS[5], KEYS[1], readAt, windowMs)

local marginMs = args.marginMs or 0

local function add_in_scope(sum, r)
  for _, s in ipairs(r.scopes) do
    if s == scope then
      for _, d in ipairs(DIMS) do sum[d] = sum[d] + amount(r, d) end
      return
    end
  end
end

-- Open reservations (stamped at a future lease expiry) whose response has not begun.
local unseen = { req = 0, ['in'] = 0, out = 0, tok = 0 }
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. now, '+inf')) do
  local enc = redis.call('HGET', KEYS[5], id)
  if enc then
    local r = decode(enc)
    if r.flags == '' then add_in_scope(unseen, r) end
  end
end

-- Calls still in the window only by its margin: the provider no longer counted them.
local dropped = { req = 0, ['in'] = 0, out = 0, tok = 0 }
if marginMs > 0 then
  local ids = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. (readAt - windowMs),
    readAt - windowMs + marginMs, 'LIMIT', 0, 1000)
  if #ids > 0 then
    for _, enc in ipairs(redis.call('HMGET', KEYS[5], unpack(ids))) do
      if enc then add_in_scope(dropped, decode(enc)) end
    end
  end
end

-- Calls the provider still counted at the reading that have left the window since (another
-- script expired them after the reading was taken): kept as gone (see expiry), they count back.
do
  local ids = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. (readAt - windowMs + marginMs - GONE_SHIFT),
    GONE_FLOOR, 'LIMIT', 0, 1000)
  if #ids > 0 then
    for _, enc in ipairs(redis.call('HMGET', KEYS[5], unpack(ids))) do
      if enc then
        local r = decode(enc)
        add_in_scope(dropped, { req = -r.req, inp = -r.inp, out = -r.out, scopes = r.scopes })
      end
    end
  end
end

-- Calls settled after the reading with output given back: the provider still counted the
-- output reserved for them (max_tokens) when it read. Counted back in, as negative drops.
if readAt < now then
  local ids = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. readAt, now, 'LIMIT', 0, 1000)
  if #ids > 0 then
    for _, enc in ipairs(redis.call('HMGET', KEYS[5], unpack(ids))) do
      local r = enc and decode(enc)
      if r and r.flags == 's' and r.rout then
        local back = { req = 0, inp = 0, out = r.out - r.rout, scopes = r.scopes }
        add_in_scope(dropped, back)
      end
    end
  end
end

local out = {}
for i, d in ipairs(DIMS) do
  local reading = args.readings[d] or {}
  local limit, remaining, reset = reading.limit or -1, reading.remaining or -1, reading.reset or -1
  -- A reading within the provider's rounding of our own count is no one else's spend.
  local rounding = reading.rounding or 0
  local field = scope .. '|' .. d
  local held = 0
  if limit >= 0 and remaining >= 0 then
    local used = tonumber(redis.call('HGET', KEYS[1], field) or '0') - dropped[d]
    local certain = math.max((limit - remaining) - used - rounding, 0)
    local possible = math.max((limit - remaining) - (used - unseen[d]) - rounding, 0)
    local untilMs = now + windowMs
    if reset > now and reset < untilMs then untilMs = reset end
    -- What may have been ours counts only as far as the reading before agrees: our own call
    -- racing its stamp shows in one reading, another client's spend in both.
    local f = foreign_of(KEYS[2], field, now)
    -- The rise since the reading before (`certain` then): another client's call that came in
    -- between. The largest in a window is kept (acquire leaves that much room free).
    local before = redis.call('HMGET', KEYS[2], field .. '|certain', field .. '|certain|until')
    if before[1] and tonumber(before[2] or '0') > now then
      local rise = certain - tonumber(before[1])
      if rise > 0 and rise >= f.rise then
        redis.call('HSET', KEYS[2], field .. '|rise', rise, field .. '|rise|until', now + windowMs)
      end
    end
    redis.call('HSET', KEYS[2], field .. '|certain', certain, field .. '|certain|until', untilMs)
    -- An exact reading (not rounded) is marked for a window, with the provider's limit.
    if rounding == 0 then
      redis.call('HSET', KEYS[2], field .. '|exact', limit, field .. '|exact|until', now + windowMs)
    else
      redis.call('HDEL', KEYS[2], field .. '|exact', field .. '|exact|until')
    end
    redis.call('HSET', KEYS[2], field .. '|seen', possible, field .. '|seen|until', untilMs)
    possible = math.max(math.min(possible, f.seen), certain)
    if possible > 0 then redis.call('HINCRBY', KEYS[3], 'observed_foreign', 1) end
    local first, second = f.steps[1], f.steps[2]
    if first == nil or certain >= first[2] then
      -- A new highest reading: held from now, and nothing below it matters.
      held = certain
      if certain > 0 then
        redis.call('HSET', KEYS[2], field, certain, field .. '|until', untilMs)
      else
        redis.call('HDEL', KEYS[2], field, field .. '|until')
      end
      redis.call('HDEL', KEYS[2], field .. '|next', field .. '|next|until')
    elseif f.promoted then
      -- Below the former next, now held: it moves up, and this reading follows it.
      held = first[2]
      redis.call('HSET', KEYS[2], field, first[2], field .. '|until', first[1])
      if certain > 0 then
        redis.call('HSET', KEYS[2], field .. '|next', certain, field .. '|next|until', untilMs)
      else
        redis.call('HDEL', KEYS[2], field .. '|next', field .. '|next|until')
      end
    else
      -- Below the held reading: it follows the held one when it is the highest since.
      held = first[2]
      if certain > 0 and (second == nil or certain >= second[2]) then
        redis.call('HSET', KEYS[2], field .. '|next', certain, field .. '|next|until', untilMs)
      end
    end
    if possible > certain then
      redis.call('HSET', KEYS[2], field .. '|last', possible, field .. '|last|until', untilMs)
    elseif f.last then
      redis.call('HDEL', KEYS[2], field .. '|last', field .. '|last|until')
    end
    if possible > held then held = possible end
  end
  out[i] = held
end
-- The reading a probe was waiting for (see acquire): the others may go, knowing it.
local id = args.of or ''
if id ~= '' and redis.call('HGET', KEYS[2], 'probe') == id then
  redis.call('HDEL', KEYS[2], 'probe', 'probe|until')
  if (args.channel or '') ~= '' then redis.call('SPUBLISH', args.channel, 'probe') end
end
return out
