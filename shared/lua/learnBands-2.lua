--[[
  Learns, for one model and per size band of llmq's estimate, how the provider's input count
  compares with that estimate: each settle's ratio (provider / estimate) goes into its band's
  exponentially decaying histogram of log-ratio buckets (2% wide, each ratio counted at its
  bucket's upper edge, so the quantile errs high), and the band's ratio is written beside it:

    cold (fewer than minSamples):  recent max                        (the reader floors it)
    warm:                          max(quantile × (1 + margin), recent max)

  capped at maxRatio. "Recent max" is the largest of the band's latest `recent` ratios, so a
  shift upwards is followed at once and a single outlier lifts reservations for `recent` settles
  only. What a cold band reserves with depends on the other bands (estimate-bands.ts), so the
  reader decides it. Weights grow by 2^(1 / halfLife) an observation of the band instead of old
  ones shrinking; they are rescaled when large.

  Input:
    KEYS[1] learning HASH  <band> -> JSON of the band's learning: n (observations), base
                           (observation of weight 1), total (weight), b (buckets, [index,
                           weight], the ratio in (1.02^(i-1), 1.02^i]), recent (latest ratios,
                           newest first), q (quantile ratio)
    KEYS[2] ratios   HASH  <band> -> JSON {ratio, warm, n}: what the band reserves with when
                           warm, its recent max when cold
    ARGV[1] msgpack map: settles ([band, estimate (> 0), provider's count (>= 0)], oldest
            first), halfLife (observations), quantile (0, 1], margin (a share), minSamples,
            recent (how many latest ratios are kept), maxRatio

  Output: KEYS[2] after the update, as HGETALL's flat list
]]
local learnKey, ratiosKey = KEYS[1], KEYS[2]
local args = cmsgpack.unpack(ARGV[1])
local halfLife, quantile, margin = args.halfLife, args.quantile, args.margin
local minSamples, keep, maxRatio = args.minSamples, args.recent, args.maxRatio
local STEP = math.log(1.02)
local LIMIT = 210 -- 1.02^210 ≈ 64: ratios beyond 1/64..64 are clamped

-- The settles of each band, in the order they happened.
local bands, order = {}, {}
for _, settle in ipairs(args.settles) do
  local band, estimate, counted = tostring(settle[1]), settle[2], settle[3]
  if not bands[band] then
    bands[band] = {}
    order[#order + 1] = band
  end
  local ratio = math.max(counted, 0.5) / estimate
  bands[band][#bands[band] + 1] = ratio
end

local stored = redis.call('HMGET', learnKey, unpack(order))
for i, band in ipairs(order) do
  local learning = stored[i] and cjson.decode(stored[i])
    or { n = 0, base = 0, total = 0, b = {}, recent = {} }
  local buckets = {}
  for _, bucket in ipairs(learning.b) do
    buckets[bucket[1]] = bucket[2]
  end
  local weight = 0
  local recent = {}
  for i = #bands[band], 1, -1 do
    recent[#recent + 1] = bands[band][i]
  end
  for _, ratio in ipairs(bands[band]) do
    local index = math.ceil(math.log(ratio) / STEP - 1e-9)
    index = math.max(-LIMIT, math.min(LIMIT, index))
    learning.n = learning.n + 1
    weight = 2 ^ ((learning.n - learning.base) / halfLife)
    buckets[index] = (buckets[index] or 0) + weight
    learning.total = learning.total + weight
  end

  -- The histogram, rescaled when weights grow large (and buckets too light to matter dropped).
  local list = {}
  if weight > 1e9 then
    learning.total = 0
    for index, bucketWeight in pairs(buckets) do
      if bucketWeight / weight >= 1e-9 then
        list[#list + 1] = { index, bucketWeight / weight }
        learning.total = learning.total + bucketWeight / weight
      end
    end
    learning.base = learning.n
  else
    for index, bucketWeight in pairs(buckets) do
      list[#list + 1] = { index, bucketWeight }
    end
  end
  table.sort(list, function(lower, higher)
    return lower[1] < higher[1]
  end)
  local quantileRatio = recent[1]
  local need, sum = quantile * learning.total, 0
  for _, bucket in ipairs(list) do
    sum = sum + bucket[2]
    if sum >= need * (1 - 1e-12) then
      quantileRatio = 1.02 ^ bucket[1]
      break
    end
  end

  -- The latest ratios, newest first.
  for _, older in ipairs(learning.recent) do
    if #recent >= keep then
      break
    end
    recent[#recent + 1] = older
  end
  while #recent > keep do
    table.remove(recent)
  end
  local recentMax = 0
  for _, ratio in ipairs(recent) do
    recentMax = math.max(recentMax, ratio)
  end

  local warm = learning.n >= minSamples
  local ratio = recentMax
  if warm then
    ratio = math.max(quantileRatio * (1 + margin), recentMax)
  end
  ratio = math.min(ratio, maxRatio)
  learning.b, learning.recent, learning.q = list, recent, quantileRatio
  redis.call('HSET', learnKey, band, cjson.encode(learning))
  local answer = { ratio = ratio, warm = warm, n = learning.n }
  redis.call('HSET', ratiosKey, band, cjson.encode(answer))
end
return redis.call('HGETALL', ratiosKey)
