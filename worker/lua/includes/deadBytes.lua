--[[
  The bytes of a queue's dead letters: `sizes` (id -> "bytes|tenant"), `order` (id by when it
  was kept), a tenant's own order (`tenantOrders` .. tenant), and `bytes` (`*`: the queue's
  total; `t:<tenant>`: each tenant's).
]]

-- Forgets a letter's bytes; returns them (nil when it was not counted).
local function forgetDead(sizes, order, bytesKey, tenantOrders, id)
  local entry = redis.call('HGET', sizes, id)
  if not entry then
    return nil
  end
  local bytes, tenant = string.match(entry, '^(%d+)|(.*)$')
  bytes = tonumber(bytes)
  redis.call('HDEL', sizes, id)
  redis.call('ZREM', order, id)
  redis.call('HINCRBY', bytesKey, '*', -bytes)
  if tenant ~= '' then
    redis.call('ZREM', tenantOrders .. tenant, id)
    if redis.call('HINCRBY', bytesKey, 't:' .. tenant, -bytes) <= 0 then
      redis.call('HDEL', bytesKey, 't:' .. tenant)
    end
  end
  return bytes
end
