-- Put a running call back to ready for its next attempt (the task retries itself with a countdown).
-- KEYS: status, lease, events
-- ARGV: call_id, token, envelope JSON
if redis.call('HGET', KEYS[1], ARGV[1]) ~= CALL.RUNNING then return 0 end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], CALL.READY)
redis.call('DEL', KEYS[2])
if ARGV[3] ~= '' then redis.call('XADD', KEYS[3], '*', 'e', ARGV[3]) end
return 1
