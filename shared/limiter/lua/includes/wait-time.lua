-- How long until `need` of scope/dim has left the window: walk the log from its oldest stamp.
-- The foreign spend `f` (foreign_of) steps down at its own times. Needs "foreign-spend", "expiry".
local function in_scope(r, scope)
  for _, s in ipairs(r.scopes) do
    if s == scope then return true end
  end
  return false
end

-- `kept`: room in `need` kept for another client's call, no longer kept once its spend lapses.
local function wait_for(logKey, resKey, now, windowMs, scope, dim, need, f, kept)
  local held = foreign_at(f, now, 0)
  local function need_at(at)
    if kept > 0 and foreign_at(f, now, at) == 0 then return need - kept end
    return need
  end
  local moments = foreign_moments(f, now)
  local m = 1
  local freed = 0
  local entries = redis.call('ZRANGEBYSCORE', logKey, GONE_FLOOR, '+inf', 'WITHSCORES', 'LIMIT', 0, 2000)
  for i = 1, #entries, 2 do
    local at = tonumber(entries[i + 1]) + windowMs - now + 1
    -- A step of the foreign spend before this entry leaves may be enough with what left before.
    while moments[m] ~= nil and moments[m] <= at do
      local t = moments[m]
      if freed + held - foreign_at(f, now, t) >= need_at(t) then return math.max(t, 1) end
      m = m + 1
    end
    local enc = redis.call('HGET', resKey, entries[i])
    if enc then
      local r = decode(enc)
      if in_scope(r, scope) then
        freed = freed + amount(r, dim)
        if freed + held - foreign_at(f, now, at) >= need_at(at) then return math.max(at, 1) end
      end
    end
  end
  -- Not enough within the scanned part of a long log: look again when its last entry has left.
  if #entries >= 4000 then
    return math.max(tonumber(entries[#entries]) + windowMs - now + 1, 1)
  end
  while moments[m] ~= nil do
    local t = moments[m]
    if freed + held - foreign_at(f, now, t) >= need_at(t) then return math.max(t, 1) end
    m = m + 1
  end
  return math.max(windowMs, 1)
end
