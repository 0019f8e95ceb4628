-- Deliver an event to one waiting waitForEvent call, if it still waits and nothing ended it yet.
-- KEYS: status, waits
-- ARGV: call_id, the event name, the event JSON ({"name", "data", "id", "time"})
-- Returns {'woken'} | {'gone'} (not waiting, or decided already)
local call_id = ARGV[1]
if redis.call('HGET', KEYS[1], call_id) ~= CALL.WAITING then return {'gone'} end
local wait = redis.call('HGET', KEYS[2], call_id)
if not wait or redis.call('HEXISTS', KEYS[2], call_id .. ':woken') == 1 then return {'gone'} end
local spec = cjson.decode(wait)
if spec.kind ~= 'waitForEvent' or spec.name ~= ARGV[2] then return {'gone'} end
redis.call('HSET', KEYS[2], call_id .. ':woken', '{"output":' .. ARGV[3] .. '}')
return {'woken'}
