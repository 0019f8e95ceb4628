-- Take a call no worker took within its tool's `x-start-timeout-s` (docs/waits.md#start-timeouts): still `ready`,
-- it becomes `running` under the caller's token, which then commits its failure `StartTimedOut` as any attempt
-- commits one (commit.lua). A call claimed meanwhile (or ended) is left alone: the claim or this, never both.
-- KEYS: status, lease
-- ARGV: call id, token, lease (ms)
-- Returns 1 when taken, else 0
if redis.call('HGET', KEYS[1], ARGV[1]) ~= CALL.READY then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], CALL.RUNNING)
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
