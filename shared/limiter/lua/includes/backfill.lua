-- Backfill: while the first in line waits for budget, calls queued behind it that fit now go
-- ahead, when it would start no later for them (their spend is still in the window when it
-- starts, so it must fit beside it then), leaving it a slot, and only within its money budgets.
-- Needs "admission", "wait-time".

-- When run.cost could start at the earliest if nothing else started before it: the latest of
-- its dimensions' waits (0 when it fits now), with `extra` more spend in the window.
local function start_of(run, extra)
  local t = 0
  for _, s in ipairs(run.scopes) do
    for _, d in ipairs(DIMS) do
      if s.limits[d] > 0 then
        local need, f, kept = need_of(run, s, d, run.cost)
        if in_scope(extra, s.name) then need = need + amount(extra, d) end
        if need > 0 then
          t = math.max(t, wait_for(run.log, run.res, run.now, run.windowMs, s.name, d, need, f, kept))
        end
      end
    end
  end
  return t
end

-- Admits up to `most` of `extras` ahead of run.cost; returns their indexes.
local function backfill(run, extras, most)
  local filled = {}
  local startAt = start_of(run, { req = 0, inp = 0, out = 0, scopes = {} })
  for i, x in ipairs(extras) do
    if #filled >= most then break end
    if redis.call('HEXISTS', run.res, x.id) == 1 then
      -- Tickets are new at every attempt: admitted already means by this very command, its
      -- first run's answer lost and ioredis sending it again.
      filled[#filled + 1] = i
    elseif fits_now(run, x.cost, 1) and start_of(run, x.cost) <= startAt then
      admit(run, x.id, x.cost)
      tally(run.stats, 'backfilled', 1)
      filled[#filled + 1] = i
    end
  end
  return filled
end
