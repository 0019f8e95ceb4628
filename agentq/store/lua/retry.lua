-- Put a running call back to ready for its next attempt (the task retries itself with a countdown).
-- KEYS: status, lease, events
-- ARGV: call_id, token, envelope JSON, lease_ms
-- The lease key keeps the releasing token (until the next claim replaces it, or lease_ms), so a replay of this
-- step whose first reply was lost to a store outage is recognized and answers 1 again.
local holder = redis.call('GET', KEYS[2])
local status = redis.call('HGET', KEYS[1], ARGV[1])
if status == CALL.READY and holder == ARGV[2] then return 1 end
if status ~= CALL.RUNNING then return 0 end
if holder and holder ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], CALL.READY)
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])
if ARGV[3] ~= '' then redis.call('XADD', KEYS[3], '*', 'e', ARGV[3]) end
return 1
