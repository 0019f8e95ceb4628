-- A job's trace context, stored once: the W3C traceparent in ARGV[1] becomes the job's when it has none yet (HSETNX:
-- of two processes storing one at once, the first wins and both read its value); a job that does not exist (ended
-- and expired) is not written to. Returns the stored traceparent, or false for no job.
-- KEYS: job
-- ARGV: traceparent
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('HSETNX', KEYS[1], 'traceparent', ARGV[1])
return redis.call('HGET', KEYS[1], 'traceparent')
