--[[
  Money budgets: reserves a call's worst-case cost against every budget it falls under, or
  refuses it; settles a reservation to the actual cost, or releases it. Whole micro-dollars.

  Input:
    KEYS[1] day    HASH budget ("global", "tenant:acme") or "model:<name>" -> spend today (µ$)
    KEYS[2] month  HASH the same, this month
    KEYS[3] res    HASH reservation id -> "µ$|period:budget,...|model"
    ARGV[1] op: reserve | settle
    reserve: ARGV[2] id, ARGV[3] µ$, ARGV[4] day key expiry ms, ARGV[5] month key expiry ms,
             ARGV[6] model, then triples budget, period (day | month), limit µ$
    settle:  ARGV[2] id, ARGV[3] actual µ$ (0 releases)

  Output:
    reserve  {0} reserved (or already), {1, budget, period, spent µ$} that budget has no room
    settle   {0, delta µ$} ({0, 0} when the reservation is unknown)
]]
local res = KEYS[3]
local id = ARGV[2]
local function key_of(period) if period == 'day' then return KEYS[1] end return KEYS[2] end

if ARGV[1] == 'reserve' then
  if redis.call('HEXISTS', res, id) == 1 then return { 0 } end
  local micros = tonumber(ARGV[3])
  local charged = {}
  for i = 7, #ARGV, 3 do
    local budget, period, limit = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
    local spent = tonumber(redis.call('HGET', key_of(period), budget) or '0')
    if spent + micros > limit then return { 1, budget, period, spent } end
    charged[#charged + 1] = period .. ':' .. budget
  end
  for _, c in ipairs(charged) do
    local period, budget = string.match(c, '^([^:]+):(.*)$')
    redis.call('HINCRBY', key_of(period), budget, micros)
  end
  local model = ARGV[6]
  redis.call('HINCRBY', KEYS[1], 'model:' .. model, micros)
  redis.call('HINCRBY', KEYS[2], 'model:' .. model, micros)
  redis.call('PEXPIREAT', KEYS[1], ARGV[4])
  redis.call('PEXPIREAT', KEYS[2], ARGV[5])
  redis.call('HSET', res, id, micros .. '|' .. table.concat(charged, ',') .. '|' .. model)
  redis.call('PEXPIREAT', res, ARGV[5])
  return { 0 }
end

-- settle
local enc = redis.call('HGET', res, id)
if not enc then return { 0, 0 } end
local micros, charged, model = string.match(enc, '^([^|]*)|([^|]*)|(.*)$')
local delta = tonumber(ARGV[3]) - tonumber(micros)
if delta ~= 0 then
  for c in string.gmatch(charged, '[^,]+') do
    local period, budget = string.match(c, '^([^:]+):(.*)$')
    redis.call('HINCRBY', key_of(period), budget, delta)
  end
  redis.call('HINCRBY', KEYS[1], 'model:' .. model, delta)
  redis.call('HINCRBY', KEYS[2], 'model:' .. model, delta)
end
redis.call('HDEL', res, id)
return { 0, delta }
