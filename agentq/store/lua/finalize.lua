-- Give a job its final status and record exactly once, and signal its end to waiters.
-- KEYS: job, events, done
-- ARGV: final status, record JSON, now (ISO), envelope JSON
local status = redis.call('HGET', KEYS[1], 'status')
if not JOB_ACTIVE[status] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'record', ARGV[2], 'finished_at', ARGV[3])
redis.call('XADD', KEYS[2], '*', 'e', ARGV[4])
redis.call('DEL', KEYS[3])
redis.call('RPUSH', KEYS[3], ARGV[1])
local expire_at = redis.call('HGET', KEYS[1], 'expire_at_ms')
if expire_at then redis.call('PEXPIREAT', KEYS[3], expire_at) end
return 1
