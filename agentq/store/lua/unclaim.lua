-- Give back a call this token claimed but must not run (the task that claimed it is not the call's own task: a
-- forged one, on another activity's queue): running -> ready, the attempt uncounted, the lease gone, nothing
-- published, so the call's own task finds it as it was. Only while `token` holds the call.
-- KEYS: status, lease, attempts
-- ARGV: call_id, token
-- Returns 1 when the call was given back, else 0.
if redis.call('GET', KEYS[2]) ~= ARGV[2] or redis.call('HGET', KEYS[1], ARGV[1]) ~= CALL.RUNNING then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], CALL.READY)
redis.call('DEL', KEYS[2])
-- the field stays (at 0 for a first attempt): deleting a hash's last field would delete the key, and the next
-- claim would make it again without the job's expiry
redis.call('HINCRBY', KEYS[3], ARGV[1], -1)
return 1
