-- Give up a lease this token holds (a tick that waits for its next attempt), and nothing else's.
-- KEYS: lease
-- ARGV: token
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
