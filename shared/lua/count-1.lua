--[[
  Adds to a queue's fleet-wide counters in one step and, when a latency is given, records it in
  the cumulative latency histogram (`le_<ms>` for every bucket at or above it, plus the sum and
  the count).

  Input:
    KEYS[1] metrics  HASH field -> count
    ARGV[1] latency ms, or -1 for none
    ARGV[2] the histogram's bucket upper bounds, comma-separated (ms)
    ARGV[3..] field, increment, field, increment…

  Output: 1
]]
local key = KEYS[1]
local latency = tonumber(ARGV[1])
if latency >= 0 then
  for bound in string.gmatch(ARGV[2], '[^,]+') do
    if latency <= tonumber(bound) then redis.call('HINCRBY', key, 'le_' .. bound, 1) end
  end
  redis.call('HINCRBY', key, 'latency_sum_ms', math.floor(latency + 0.5))
  redis.call('HINCRBY', key, 'latency_count', 1)
end
for i = 3, #ARGV, 2 do
  redis.call('HINCRBY', key, ARGV[i], tonumber(ARGV[i + 1]))
end
return 1
