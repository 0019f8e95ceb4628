-- End an agent tick: keep its exchange, its usage and its structural errors, and say whether the job can
-- take its next step now (no awaited call open) or when its last open call commits.
-- KEYS: job, tick lease, exchanges, log, events, call statuses
-- ARGV: token, exchange JSON, 1 if the exchange counts as a tick (0 for one whose answer is sent back),
--       final output JSON ('' for none), usage JSON {field: n}, number of log messages n, n message JSONs,
--       then event envelope JSONs
-- Returns {'ended', open awaited calls, ticks so far[, the job hash (flat) when no awaited call is open: what the
--          job's next step reads[, and with the final output, the log and the call statuses (flat): what the job's
--          end reads]]} or {'superseded'}
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {'superseded'} end
local expire_at = redis.call('HGET', KEYS[1], 'expire_at_ms')
redis.call('RPUSH', KEYS[3], ARGV[2])
redis.call('HINCRBY', KEYS[1], 'exchanges', 1)
local ticks = redis.call('HINCRBY', KEYS[1], 'ticks', tonumber(ARGV[3]))
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'final_output', ARGV[4]) end
for field, n in pairs(cjson.decode(ARGV[5])) do
  if n ~= 0 then redis.call('HINCRBY', KEYS[1], 'usage.' .. field, n) end
end
local n = tonumber(ARGV[6])
for i = 7, 6 + n do redis.call('RPUSH', KEYS[4], ARGV[i]) end
for i = 7 + n, #ARGV do redis.call('XADD', KEYS[5], '*', 'e', ARGV[i]) end
for _, k in ipairs({KEYS[3], KEYS[4]}) do
  if redis.call('PTTL', k) == -1 then redis.call('PEXPIREAT', k, expire_at) end
end
redis.call('HSET', KEYS[1], 'ticking', '0', 'tick_attempt', '0')
redis.call('DEL', KEYS[2])
local open = redis.call('HGET', KEYS[1], 'open') or '0'
if tonumber(open) > 0 then return {'ended', open, tostring(ticks)} end
if ARGV[4] == '' then return {'ended', open, tostring(ticks), redis.call('HGETALL', KEYS[1])} end
return {'ended', open, tostring(ticks), redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[4], 0, -1),
        redis.call('HGETALL', KEYS[6])}
