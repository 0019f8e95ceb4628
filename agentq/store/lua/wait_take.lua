-- Decide how a waiting call ends, once: by what woke it (a delivered event or signal), else by its due time
-- (a sleep's output, or a timeout). The decision is kept, so a fire that dies before its commit is repeated
-- with the same outcome, and nothing delivered afterwards takes its place.
-- KEYS: status, waits
-- ARGV: call_id, now (unix ms), a sleep's output JSON ({"woke_at"}) should it end now
-- Returns {'woken', wait JSON, outcome JSON ({"output": value} | {"timeout": true})}
--      or {'early', wait JSON} (not due: nothing delivered yet), {'opening'} (still running: the attempt that wrote
--      the timer has not opened the wait yet) or {'gone', status} (not waiting)
local call_id = ARGV[1]
local status = redis.call('HGET', KEYS[1], call_id)
if status == CALL.RUNNING then return {'opening'} end
if status ~= CALL.WAITING then return {'gone', status or 'missing'} end
local wait = redis.call('HGET', KEYS[2], call_id)
if not wait then return {'gone', 'no wait'} end
local woken = redis.call('HGET', KEYS[2], call_id .. ':woken')
if woken then return {'woken', wait, woken} end
local spec = cjson.decode(wait)
if type(spec.due_ms) ~= 'number' or spec.due_ms > tonumber(ARGV[2]) then return {'early', wait} end
if spec.kind == 'sleep' then woken = '{"output":' .. ARGV[3] .. '}' else woken = '{"timeout":true}' end
redis.call('HSET', KEYS[2], call_id .. ':woken', woken)
return {'woken', wait, woken}
