-- Give the schedules' firing lease back, if this token holds it (store/schedules.py `release_lease`).
-- KEYS: agentq:{schedules}:lease (string: the holder's token)
-- ARGV: token
-- Returns 1 when it was released, else 0
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
