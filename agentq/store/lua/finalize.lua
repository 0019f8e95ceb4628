-- Give a job its final status and record exactly once.
-- KEYS: job, events
-- ARGV: final status, record JSON, now (ISO), envelope JSON
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'running' and status ~= 'awaiting_approval' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'record', ARGV[2], 'finished_at', ARGV[3])
redis.call('XADD', KEYS[2], '*', 'e', ARGV[4])
return 1
