-- Send a signal to a job (docs/waits.md): taken at once by its oldest open waitForSignal of that name, else kept
-- in the job's list of that name for the next one, in order.
-- KEYS: job, status, waits, the signals list of its name
-- ARGV: the signal's name, the signal JSON ({"name", "data", "id", "time"})
-- Returns {'woken', call id} | {'kept'} | {'missing'} | {'ended', job status}
local job_status = redis.call('HGET', KEYS[1], 'status')
if not job_status then return {'missing'} end
if not JOB_ACTIVE[job_status] then return {'ended', job_status} end
local first, first_at
local waits = redis.call('HGETALL', KEYS[3])
for i = 1, #waits, 2 do
  local call_id = waits[i]
  if not string.find(call_id, ':woken', 1, true) and redis.call('HGET', KEYS[2], call_id) == CALL.WAITING
      and redis.call('HEXISTS', KEYS[3], call_id .. ':woken') == 0 then
    local spec = cjson.decode(waits[i + 1])
    if spec.kind == 'waitForSignal' and spec.name == ARGV[1] and (not first or spec.opened_ms < first_at) then
      first, first_at = call_id, spec.opened_ms
    end
  end
end
if first then
  redis.call('HSET', KEYS[3], first .. ':woken', '{"output":' .. ARGV[2] .. '}')
  return {'woken', first}
end
redis.call('RPUSH', KEYS[4], ARGV[2])
local expire_at = redis.call('HGET', KEYS[1], 'expire_at_ms')
if expire_at then redis.call('PEXPIREAT', KEYS[4], expire_at) end
return {'kept'}
