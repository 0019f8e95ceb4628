-- Move a schedule's state on, if nobody moved it since the caller read it (store/schedules.py `advance`).
-- KEYS: agentq:{schedules}:state (hash: name -> state JSON), agentq:{schedules}:due (zset: name -> due time, ms)
-- ARGV: name, the state as read ("" for none), the new state, the next due time in ms ("": no next run)
-- Returns 1 when it wrote, 0 when the state changed meanwhile (nothing written)
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[4] == '' then redis.call('ZREM', KEYS[2], ARGV[1]) else redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1]) end
return 1
