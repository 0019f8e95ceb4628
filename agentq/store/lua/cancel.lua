-- Cancel a job: stop dispatching and mark every call that has not started (or waits) as canceled.
-- KEYS: job, status, events, done
-- ARGV: now (ISO), envelope JSON
-- Calls running now are not interrupted: the job's `job.finished` event lists them as `running` (their own
-- `call.finished`, marked `after_cancel`, comes later; see commit.lua).
-- Returns {'canceled', id of each call that was ready (its task may still be queued)...}
--      or {'final', status} when the job had already ended
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
if not JOB_ACTIVE[status] then
  return {'final', status}
end
redis.call('HSET', KEYS[1], 'status', JOB.CANCELED, 'finished_at', ARGV[1])
local result = {'canceled'}
local running = {}
local entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  local s = entries[i + 1]
  if CALL_UNSTARTED[s] or s == CALL.WAITING then  -- a wait is dropped
    redis.call('HSET', KEYS[2], entries[i], CALL.CANCELED)
    if s == CALL.READY then table.insert(result, entries[i]) end
  elseif s == CALL.RUNNING then
    table.insert(running, entries[i])
  end
end
local envelope = ARGV[2]
if #running > 0 then
  table.sort(running)
  envelope = string.sub(envelope, 1, -2) .. ',"running":' .. cjson.encode(running) .. '}'
end
redis.call('XADD', KEYS[3], '*', 'e', envelope)
redis.call('DEL', KEYS[4])
redis.call('RPUSH', KEYS[4], JOB.CANCELED)
local expire_at = redis.call('HGET', KEYS[1], 'expire_at_ms')
if expire_at then redis.call('PEXPIREAT', KEYS[4], expire_at) end
return result
