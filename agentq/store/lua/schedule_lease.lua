-- Take the schedules' firing lease, or renew it when this token holds it (store/schedules.py `take_lease`).
-- KEYS: agentq:{schedules}:lease (string: the holder's token)
-- ARGV: token, ttl (ms)
-- Returns 1 when the token holds the lease now, else 0
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0
