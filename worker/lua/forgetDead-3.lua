--[[
  Forgets a dead letter's bytes once it leaves (retried, purged, removed).

  Input:
    KEYS[1] sizes  HASH id -> "bytes|tenant"
    KEYS[2] order  ZSET id by when it was kept
    KEYS[3] bytes  HASH "*" -> the queue's bytes, "t:<tenant>" -> a tenant's
    ARGV[1] the tenants' order key prefix
    ARGV[2] letter id

  Output: the bytes forgotten (0 when the letter was not counted)
]]
--- @include "deadBytes"

return forgetDead(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2]) or 0
