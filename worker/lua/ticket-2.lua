--[[
  Writes a job's corrected ticket into its options, as BullMQ stores them (`opts`, JSON), while
  the caller holds the job's lock and the options are still those it read: its next admission
  reserves what its request implies.

  Input:
    KEYS[1] job       HASH BullMQ's job
    KEYS[2] lock      STRING BullMQ's lock of the job (its holder's token)
    ARGV[1] the caller's lock token
    ARGV[2] the options as read
    ARGV[3] the options to write

  Output: 1 written, 0 the options changed since they were read, -1 the lock is not the caller's
]]
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return -1
end
if redis.call('HGET', KEYS[1], 'opts') ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'opts', ARGV[3])
return 1
