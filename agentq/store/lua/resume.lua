-- Resume an ended job where it stopped (docs/resume.md), once: a failed or canceled job goes back to running. Its
-- committed calls keep their outcomes; its failed and canceled calls go back to ready (pending while a call they
-- wait on runs again; awaiting approval when a reviewer must let them run) with fresh attempt counts; the run that
-- ended is kept in the job's `runs`; its end signal, saved record and tick lease are cleared; an agent job's log
-- gets the note of what happened; the stream gets the `job.resumed` event; every key gets the new expiry.
-- KEYS: job, status, calls, waiting, attempts, lost, dependents, approval, events, done, log, tick lease,
--       then the job's other keys, which only get the new expiry (exchanges, tools, spec, budget, waits)
-- ARGV: [1] the resume, a JSON object (`ResumeArgs` in store/resume.py): now (ISO), expire_at_ms, options (the
--       job's options with the overrides, JSON; absent: unchanged), status (the status it resumes to: running,
--       or waiting for its concurrency keys), event (the job.resumed entry, packed), note (an agent job's note
--       message JSON; absent: none), lease_prefix (the prefix of the job's call leases)
-- Returns {'resumed', run, status, open awaited calls, exchanges, kind, n, n ready call records...}
--      or {'conflict', status} (not failed nor canceled: nothing written) or {'missing'}
local a = cjson.decode(ARGV[1])
local job = KEYS[1]
local v = redis.call('HMGET', job, 'status', 'record', 'finished_at', 'resumed_at', 'started_at', 'created_at',
                     'runs', 'kind', 'exchanges', 'error')
local status = v[1]
if not status then return {'missing'} end
if status ~= JOB.FAILED and status ~= JOB.CANCELED then return {'conflict', status} end

-- the run that ended
local runs = v[7] and cjson.decode(v[7]) or {}
local saved = v[2] and cjson.decode(v[2]) or {}
local err = saved.error
if err == nil and v[10] then err = cjson.decode(v[10]) end
runs[#runs + 1] = {run = #runs + 1, started_at = v[4] or v[5] or v[6] or cjson.null, finished_at = v[3] or cjson.null,
                   status = status, error = err or cjson.null}
local run = #runs + 1

-- the calls to run afresh: failed and canceled ones
local entries = redis.call('HGETALL', KEYS[2])
local again, order = {}, {}
for i = 1, #entries, 2 do
  local s = entries[i + 1]
  if s == CALL.FAILED or s == CALL.CANCELED then
    again[entries[i]] = s
    order[#order + 1] = entries[i]
  end
end
table.sort(order)
-- a failed call released its dependents when it failed: those that run (again) wait on it once more
for _, id in ipairs(order) do
  if again[id] == CALL.FAILED then
    local dependents = redis.call('HGET', KEYS[7], id)
    for _, dependent in ipairs(dependents and cjson.decode(dependents) or {}) do
      if again[dependent] or redis.call('HGET', KEYS[2], dependent) == CALL.PENDING then
        redis.call('HINCRBY', KEYS[4], dependent, 1)
      end
    end
  end
end
local ready, held, held_events = {}, 0, {}
for _, id in ipairs(order) do
  local next_status = CALL.READY
  local approval = redis.call('HGET', KEYS[8], id)
  if tonumber(redis.call('HGET', KEYS[4], id) or '0') > 0 then
    next_status = CALL.PENDING
  elseif approval then
    next_status = CALL.AWAITING_APPROVAL
    held = held + 1
    if approval ~= '1' then held_events[#held_events + 1] = approval end  -- its call.awaiting_approval event
  end
  redis.call('HSET', KEYS[2], id, next_status)
  redis.call('HDEL', KEYS[5], id)
  redis.call('HDEL', KEYS[6], id)
  redis.call('DEL', a.lease_prefix .. id)  -- an attempt the end cut off commits nothing now (commit.lua)
  -- the record names the run it runs in (`CallRecord.run`, last in its JSON): its task gets an id of its own, so
  -- a revoke of the run that ended (a cancel, a deadline) does not drop it
  local record = redis.call('HGET', KEYS[3], id)
  local base = string.gsub(record, ',"run":%d+}$', '}')
  record = string.sub(base, 1, -2) .. ',"run":' .. run .. '}'
  redis.call('HSET', KEYS[3], id, record)
  if next_status == CALL.READY then ready[#ready + 1] = record end
end

-- the awaited calls not ended, counted again
local open = 0
entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  if not CALL_FINAL[entries[i + 1]] then
    local record = redis.call('HGET', KEYS[3], entries[i])
    if record and cjson.decode(record).awaited then open = open + 1 end
  end
end

local resumed = a.status
if held > 0 and resumed == JOB.RUNNING then resumed = JOB.AWAITING_APPROVAL end
redis.call('HSET', job, 'status', resumed, 'runs', cjson.encode(runs), 'resumed_at', a.now, 'open', tostring(open),
           'ticking', '0', 'tick_attempt', '0', 'awaiting', tostring(held), 'expire_at_ms', tostring(a.expire_at_ms))
if a.options then redis.call('HSET', job, 'options', a.options) end
redis.call('HDEL', job, 'record', 'finished_at', 'error', 'record_stale')
redis.call('HDEL', KEYS[16], 'exceeded')  -- the budget's first refusal: a resume asks again (with a larger budget)
redis.call('DEL', KEYS[12], KEYS[10])
if a.note then
  local length = redis.call('RPUSH', KEYS[11], a.note)
  if length == 1 then redis.call('PEXPIREAT', KEYS[11], a.expire_at_ms) end
end
redis.call('XADD', KEYS[9], '*', 'e', string.sub(a.event, 1, -2) .. ',"run":' .. run .. '}')
for _, held_event in ipairs(held_events) do redis.call('XADD', KEYS[9], '*', 'e', held_event) end
for i = 1, #KEYS do
  if i ~= 10 and i ~= 12 then redis.call('PEXPIREAT', KEYS[i], a.expire_at_ms) end
end

local result = {'resumed', tostring(run), resumed, tostring(open), v[9] or '0', v[8] or 'plan', tostring(#ready)}
for _, r in ipairs(ready) do result[#result + 1] = r end
return result
