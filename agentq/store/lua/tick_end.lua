-- End an agent tick: keep its exchange, its usage and its structural errors, and say whether the job can
-- take its next step now (no awaited call open) or when its last open call commits.
-- KEYS: job, tick lease, exchanges, log, events, call statuses
-- ARGV: [1] the end, a JSON object (`TickEndArgs` in store/step_args.py): token, exchange (its JSON), counts
--           (true if the exchange counts as a tick; false for one whose answer is sent back), output (the final
--           output JSON; absent: none), usage ({field: n}), messages (the number n of log messages)
--       [2..] n message JSONs, then event envelope JSONs
-- Returns {'ended', open awaited calls, ticks so far[, the job hash (flat) when no awaited call is open: what the
--          job's next step reads[, and with the final output, the log and the call statuses (flat): what the job's
--          end reads]]} or {'superseded'}
local a = cjson.decode(ARGV[1])
if redis.call('GET', KEYS[2]) ~= a.token then return {'superseded'} end
local expire_at = redis.call('HGET', KEYS[1], 'expire_at_ms')
redis.call('RPUSH', KEYS[3], a.exchange)
redis.call('HINCRBY', KEYS[1], 'exchanges', 1)
local ticks = redis.call('HINCRBY', KEYS[1], 'ticks', a.counts and 1 or 0)
if a.output then redis.call('HSET', KEYS[1], 'final_output', a.output) end
for field, n in pairs(a.usage) do
  if n ~= 0 then redis.call('HINCRBY', KEYS[1], 'usage.' .. field, n) end
end
local n = a.messages
for i = 2, 1 + n do redis.call('RPUSH', KEYS[4], ARGV[i]) end
for i = 2 + n, #ARGV do redis.call('XADD', KEYS[5], '*', 'e', ARGV[i]) end
for _, k in ipairs({KEYS[3], KEYS[4]}) do
  if redis.call('PTTL', k) == -1 then redis.call('PEXPIREAT', k, expire_at) end
end
redis.call('HSET', KEYS[1], 'ticking', '0', 'tick_attempt', '0')
redis.call('DEL', KEYS[2])
local open = redis.call('HGET', KEYS[1], 'open') or '0'
if tonumber(open) > 0 then return {'ended', open, tostring(ticks)} end
if not a.output then return {'ended', open, tostring(ticks), redis.call('HGETALL', KEYS[1])} end
return {'ended', open, tostring(ticks), redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[4], 0, -1),
        redis.call('HGETALL', KEYS[6])}
