-- Increments meant for one hash, summed in the script so that a run that settles or admits
-- many calls writes each field once (flush_tally) instead of once a call.
local function new_tally()
  return { sums = {}, order = {} }
end

local function tally(t, field, n)
  local sum = t.sums[field]
  if sum == nil then
    t.order[#t.order + 1] = field
    t.sums[field] = n
  else
    t.sums[field] = sum + n
  end
end

-- What the tally holds of `field` and has not written yet.
local function tallied(t, field)
  return t.sums[field] or 0
end

local function flush_tally(t, key)
  for _, field in ipairs(t.order) do
    local n = t.sums[field]
    -- A zero is not written: readers take a missing field for 0, and Lua's -0 would be sent
    -- as "-0", which HINCRBY refuses.
    if n ~= 0 then redis.call('HINCRBY', key, field, n) end
  end
  t.sums = {}
  t.order = {}
end

-- Adds sign * the reservation's spend, for each of its scopes, to a tally of the totals.
local function tally_totals(t, r, sign)
  for _, s in ipairs(r.scopes) do
    for _, d in ipairs(DIMS) do
      local a = amount(r, d)
      if a ~= 0 then tally(t, s .. '|' .. d, sign * a) end
    end
  end
end

-- Adds sign * the reservation's spend to the running totals of each of its scopes, now.
local function add_totals(totKey, r, sign)
  local t = new_tally()
  tally_totals(t, r, sign)
  flush_tally(t, totKey)
end

