-- End a job that ran past its `options.deadline_s` (docs/waits.md#deadlines): it fails with the record the caller
-- built from the log it read, and nothing of it commits afterwards. Every call not ended is canceled — a running
-- one too, so its late commit finds it no longer running and is refused (commit.lua: 'duplicate') — and a tick in
-- flight loses its lease (its end is refused: tick_end.lua 'superseded').
-- KEYS: job, status, events, done, log, tick lease
-- ARGV: record JSON, now (ISO), envelope JSON, the log's length the record was built from
-- Returns {'ended', ready ids JSON, running ids JSON, waiting ids JSON}, {'final', status}, {'missing'}
--      or {'moved'} (the log grew since it was read: build the record again)
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
if not JOB_ACTIVE[status] then return {'final', status} end
if redis.call('LLEN', KEYS[5]) ~= tonumber(ARGV[4]) then return {'moved'} end
redis.call('HSET', KEYS[1], 'status', JOB.FAILED, 'record', ARGV[1], 'finished_at', ARGV[2], 'open', '0',
           'ticking', '0')
redis.call('DEL', KEYS[6])
local ready, running, waiting = {}, {}, {}
local entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  local s = entries[i + 1]
  if not CALL_FINAL[s] then
    redis.call('HSET', KEYS[2], entries[i], CALL.CANCELED)
    if s == CALL.READY then table.insert(ready, entries[i])
    elseif s == CALL.RUNNING then table.insert(running, entries[i])
    elseif s == CALL.WAITING then table.insert(waiting, entries[i]) end
  end
end
redis.call('XADD', KEYS[3], '*', 'e', ARGV[3])
redis.call('DEL', KEYS[4])
redis.call('RPUSH', KEYS[4], JOB.FAILED)
local expire_at = redis.call('HGET', KEYS[1], 'expire_at_ms')
if expire_at then redis.call('PEXPIREAT', KEYS[4], expire_at) end
return {'ended', cjson.encode(ready), cjson.encode(running), cjson.encode(waiting)}
