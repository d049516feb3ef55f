--[[
  Learns, for one model, how the provider's input count compares with llmq's estimate: one
  settle's ratio (provider / estimate) goes into an exponentially decaying histogram of
  log-ratio buckets (2% wide, each ratio counted at its bucket's upper edge, so the quantile
  errs high), and the ratio to reserve with is written beside it:

    cold (fewer than minSamples):  max(1, recent max)              (today's estimate)
    warm:                          max(quantile × (1 + margin), recent max)

  capped at maxRatio. "Recent max" is the largest of the latest `recent` ratios, so a shift
  upwards is followed at once and a single outlier lifts reservations for `recent` settles only;
  in the histogram it weighs too little to move the quantile. Weights grow by 2^(1 / halfLife)
  an observation instead of old ones shrinking; they are rescaled when large.

  Input:
    KEYS[1] learn  HASH  n -> observations, base -> observation of weight 1, total -> weight,
                         b<index> -> weight of bucket index (ratio in (1.02^(i-1), 1.02^i]),
                         recent -> latest ratios, comma-separated, q -> quantile ratio,
                         ratio -> the ratio to reserve with
    ARGV[1] llmq's estimate (tokens, > 0)
    ARGV[2] the provider's count (tokens, >= 0)
    ARGV[3] half-life, in observations
    ARGV[4] quantile, in (0, 1]
    ARGV[5] margin on the quantile, a share
    ARGV[6] minSamples
    ARGV[7] recent: how many latest ratios are kept
    ARGV[8] maxRatio

  Output: the ratio to reserve with, as a string
]]
local key = KEYS[1]
local estimate, actual = tonumber(ARGV[1]), tonumber(ARGV[2])
local halfLife, quantile, margin = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local minSamples, keep, maxRatio = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local STEP = math.log(1.02)
local LIMIT = 210 -- 1.02^210 ≈ 64: ratios beyond 1/64..64 are clamped

local ratio = math.max(actual, 0.5) / estimate
local index = math.ceil(math.log(ratio) / STEP - 1e-9)
index = math.max(-LIMIT, math.min(LIMIT, index))

local n = redis.call('HINCRBY', key, 'n', 1)
local base = tonumber(redis.call('HGET', key, 'base') or '0')
local weight = 2 ^ ((n - base) / halfLife)
redis.call('HINCRBYFLOAT', key, 'b' .. index, weight)
local total = tonumber(redis.call('HINCRBYFLOAT', key, 'total', weight))

-- The histogram, rescaled when weights grow large (and buckets too light to matter dropped).
local buckets = {}
local flat = redis.call('HGETALL', key)
for i = 1, #flat, 2 do
  local f = flat[i]
  if string.sub(f, 1, 1) == 'b' and f ~= 'base' then
    buckets[#buckets + 1] = { tonumber(string.sub(f, 2)), tonumber(flat[i + 1]) }
  end
end
if weight > 1e9 then
  total = 0
  for _, b in ipairs(buckets) do
    b[2] = b[2] / weight
    if b[2] < 1e-9 then
      redis.call('HDEL', key, 'b' .. b[1])
      b[2] = 0
    else
      redis.call('HSET', key, 'b' .. b[1], tostring(b[2]))
    end
    total = total + b[2]
  end
  redis.call('HSET', key, 'base', n, 'total', tostring(total))
end
table.sort(buckets, function(a, b) return a[1] < b[1] end)
local q = ratio
local need, sum = quantile * total, 0
for _, b in ipairs(buckets) do
  sum = sum + b[2]
  if sum >= need * (1 - 1e-12) then
    q = 1.02 ^ b[1]
    break
  end
end

-- The latest ratios, newest first.
local recent = { tostring(ratio) }
local recentMax = ratio
for v in string.gmatch(redis.call('HGET', key, 'recent') or '', '[^,]+') do
  if #recent >= keep then break end
  recent[#recent + 1] = v
  recentMax = math.max(recentMax, tonumber(v))
end

local reserve
if n < minSamples then
  reserve = math.max(1, recentMax)
else
  reserve = math.max(q * (1 + margin), recentMax)
end
reserve = math.min(reserve, maxRatio)
redis.call('HSET', key, 'recent', table.concat(recent, ','), 'q', tostring(q), 'ratio', tostring(reserve))
return tostring(reserve)
