--[[
  Adds to a queue's fleet-wide counters in one step and records the latencies given in the
  cumulative latency histogram (`le_<ms>` for every bucket at or above each, plus the sum and
  the count).

  Input:
    KEYS[1] metrics  HASH field -> count
    ARGV[1] latencies ms, comma-separated, or '' (or -1) for none
    ARGV[2] the histogram's bucket upper bounds, comma-separated (ms)
    ARGV[3..] field, increment, field, increment…

  Output: 1
]]
local key = KEYS[1]
local bounds = {}
for bound in string.gmatch(ARGV[2], '[^,]+') do
  bounds[#bounds + 1] = tonumber(bound)
end
local counts, sum, recorded = {}, 0, 0
for text in string.gmatch(ARGV[1], '[^,]+') do
  local latency = tonumber(text)
  if latency and latency >= 0 then
    for j, bound in ipairs(bounds) do
      if latency <= bound then
        counts[j] = (counts[j] or 0) + 1
      end
    end
    sum = sum + math.floor(latency + 0.5)
    recorded = recorded + 1
  end
end
for j, bound in ipairs(bounds) do
  if counts[j] then
    redis.call('HINCRBY', key, 'le_' .. bound, counts[j])
  end
end
if recorded > 0 then
  redis.call('HINCRBY', key, 'latency_sum_ms', sum)
  redis.call('HINCRBY', key, 'latency_count', recorded)
end
for i = 3, #ARGV, 2 do
  redis.call('HINCRBY', key, ARGV[i], tonumber(ARGV[i + 1]))
end
return 1
