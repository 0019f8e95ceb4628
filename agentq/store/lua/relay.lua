-- Move a child job's relay cursor from one stream id to the next, only if no other relay moved it first.
-- KEYS: the child's job hash
-- ARGV: the cursor read, the new cursor
if (redis.call('HGET', KEYS[1], 'relayed') or '0-0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'relayed', ARGV[2])
return 1
