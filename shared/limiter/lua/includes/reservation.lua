-- A reservation in the res hash: "requests|input|output|flags|scopes|sent|take"; flags "" open,
-- "s" stamped, "b" begun under 'produced' (request and input then in `<id>:in`, stamped; the
-- output open), and "r" beside "s" once the call's answer brought a reading (`read`, see
-- reading.lua), "o" once its open spend is in the open sums (`summed`, see add_open), "p"
-- while it is out as a last room's probe (`probe`, see admission.lua's last_room), and "w"
-- while it waits for its first answer in its scopes' sets of such calls (`awaiting`, see
-- awaiting_key).
-- `sent`: when its request was sent (ms), as its stamp tells; before, when acquire
-- admitted it (no later); nil in an entry written before it was kept (taken as long ago).
-- `take`: the job its admission holds (acquire-13.lua), to the end (any character; none: nil).

-- `now` as given (an injected clock), else Redis's TIME in ms.
local function now_ms(given)
  if given ~= nil then
    return given
  end
  local time = redis.call('TIME')
  local seconds, micros = tonumber(time[1]), tonumber(time[2])
  return seconds * 1000 + math.floor(micros / 1000)
end

local function decode(enc)
  local req, inp, out, flags, scopes, rest =
    string.match(enc, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)(.*)$')
  local sent, take = string.match(rest, '^|?([^|]*)|?(.*)$')
  local list = {}
  for name in string.gmatch(scopes, '[^,]+') do
    list[#list + 1] = name
  end
  return {
    req = tonumber(req),
    inp = tonumber(inp),
    out = tonumber(out),
    flags = (string.gsub(flags, '[ropw]', '')),
    read = string.find(flags, 'r', 1, true) ~= nil,
    summed = string.find(flags, 'o', 1, true) ~= nil,
    probe = string.find(flags, 'p', 1, true) ~= nil,
    awaiting = string.find(flags, 'w', 1, true) ~= nil,
    scopes = list,
    sent = tonumber(sent),
    take = take ~= '' and take or nil,
  }
end

local function encode(reservation)
  local counts = reservation.req .. '|' .. reservation.inp .. '|' .. reservation.out
  local flags = reservation.flags
    .. (reservation.read and 'r' or '')
    .. (reservation.summed and 'o' or '')
    .. (reservation.probe and 'p' or '')
    .. (reservation.awaiting and 'w' or '')
  local scopes = table.concat(reservation.scopes, ',')
  local take = reservation.take and ('|' .. reservation.take) or ''
  return counts .. '|' .. flags .. '|' .. scopes .. '|' .. (reservation.sent or '') .. take
end

-- A scope with a share of the slots (a pool's deployment) keeps its calls in flight whose answer
-- has not begun in a sorted set of its own, by lease end: admitted in (admission.lua), out once
-- the answer begins or the call ends (record-10.lua), kept with the lease (renew-4.lua); a lapsed
-- lease counts no more. Counting them reads no call.
local function awaiting_key(slotsKey, scope)
  return slotsKey .. ':' .. scope
end

-- Keeps `id` among its scopes' awaiting calls until `leaseEnd` (`xx`: only if still there, a
-- lease renewed: a later end); the set lives as long as its last lease.
local function keep_awaiting(slotsKey, scope, id, leaseEnd, now, xx)
  local key = awaiting_key(slotsKey, scope)
  if xx then
    if redis.call('ZADD', key, 'XX', 'CH', leaseEnd, id) == 0 then
      return
    end
  else
    redis.call('ZADD', key, leaseEnd, id)
  end
  local ttl = math.max(leaseEnd - now, 1)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- Its answer began, or it ended: the call leaves its scopes' awaiting calls.
local function stop_awaiting(slotsKey, id, reservation)
  if not reservation.awaiting then
    return
  end
  reservation.awaiting = nil
  for _, scope in ipairs(reservation.scopes) do
    redis.call('ZREM', awaiting_key(slotsKey, scope), id)
  end
end

-- Whether a provider's readings may describe `scope`: a tenant's is llmq's own (CallHandle
-- refuses a reading for one), so it has no view, drop or open sums to keep.
local function readable(scope)
  return string.sub(scope, 1, 7) ~= 'tenant:'
end

local FIELD = { req = 'req', ['in'] = 'inp', out = 'out' }
local function amount(reservation, dim)
  if dim == 'tok' then
    return reservation.inp + reservation.out
  end
  return reservation[FIELD[dim]]
end

local function in_scope(reservation, scope)
  for _, name in ipairs(reservation.scopes) do
    if name == scope then
      return true
    end
  end
end

-- Sums of increments by field (`sums`), written once each by `flush`: a run that admits, settles
-- or expires many calls writes each field once. `suffix` names a running count ("|left").
local function add_spend(sums, reservation, sign, suffix)
  for _, scope in ipairs(reservation.scopes) do
    for _, dim in ipairs(DIMS) do
      local field = scope .. '|' .. dim .. (suffix or '')
      sums[field] = (sums[field] or 0) + sign * amount(reservation, dim)
    end
  end
end

-- Open spend, summed in tot as "scope|dim|open" (req, in, out; tok is in + out): what calls not
-- begun hold (under 'produced', a begun call's output too). A reading takes it as not counted
-- (reading.lua) without reading the open calls one by one. Every change to an open reservation
-- moves it: admitted (+, marked `summed`), stamped, ended or released, adjusted, left the
-- window. One admitted before the sums were kept (not `summed`) takes nothing from them. A
-- tenant's scope keeps none: it is llmq's own, and no provider's reading describes it.
local OPEN_DIMS = { 'req', 'in', 'out' }
local function add_open(sums, reservation, sign)
  if reservation.flags == 's' or not reservation.summed then
    return
  end
  for _, scope in ipairs(reservation.scopes) do
    for _, dim in ipairs(OPEN_DIMS) do
      if readable(scope) then
        local field = scope .. '|' .. dim .. '|open'
        sums[field] = (sums[field] or 0) + sign * amount(reservation, dim)
      end
    end
  end
end

local function flush(sums, key)
  for field, delta in pairs(sums) do
    if delta ~= 0 then
      redis.call('HINCRBY', key, field, delta)
    end
  end
end

-- A scope's sums in tot, read in one HMGET: per dimension `used` (our window sum), `left` (what
-- has left the window) and `open` (see add_open; tok is in + out).
local function tot_of(ctx, scope)
  local fields = {}
  for _, dim in ipairs(DIMS) do
    fields[#fields + 1] = scope .. '|' .. dim
    fields[#fields + 1] = scope .. '|' .. dim .. '|left'
  end
  for _, dim in ipairs(OPEN_DIMS) do
    fields[#fields + 1] = scope .. '|' .. dim .. '|open'
  end
  local values = redis.call('HMGET', ctx.tot, unpack(fields))
  local used, left, open = {}, {}, {}
  for i, dim in ipairs(DIMS) do
    used[dim] = tonumber(values[2 * i - 1] or '0')
    left[dim] = tonumber(values[2 * i] or '0')
  end
  for i, dim in ipairs(OPEN_DIMS) do
    open[dim] = tonumber(values[2 * #DIMS + i] or '0')
  end
  open.tok = open['in'] + open.out
  return used, left, open
end
