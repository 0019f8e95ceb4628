-- A reviewer's decision on a call awaiting approval (docs/protocol.md#approvals). A rejection commits the call's
-- failure in this same step, as commit.lua commits a running call's (its messages appended, its status `failed`,
-- its events published, the calls that waited only on it released): no process can be cut off between the
-- decision and the failure, and a second decision finds the call `failed`.
-- KEYS: job, calls, status, approval, events, log, waiting, dependents, done
-- ARGV: [1] the decision, a JSON object (`DecideArgs` in store/step_args.py): call_id, decision ('approve' |
--       'edit' | 'reject'), record (the edited record JSON; '' unless edit), event (the envelope entry to publish;
--       '': none), messages (reject: the number n of the failure's messages)
--       [2..] (reject) n message JSONs, then the failure's event envelope entries
-- Returns {'decided', record JSON} (approve, edit), {'committed', ...} (reject: as `committed_reply` in
--         _committed.lua builds it), or {'conflict', status} | {'missing'}
--#include _committed
local a = cjson.decode(ARGV[1])
local call_id = a.call_id
local status = redis.call('HGET', KEYS[3], call_id)
if not status then return {'missing'} end
local job_status = redis.call('HGET', KEYS[1], 'status')
if status ~= CALL.AWAITING_APPROVAL or not JOB_ACTIVE[job_status] then return {'conflict', status} end
if a.decision == 'edit' then redis.call('HSET', KEYS[2], call_id, a.record) end
redis.call('HDEL', KEYS[4], call_id)
if redis.call('HINCRBY', KEYS[1], 'awaiting', -1) <= 0 and job_status == JOB.AWAITING_APPROVAL then
  redis.call('HSET', KEYS[1], 'status', JOB.RUNNING)
end
if a.event ~= '' then redis.call('XADD', KEYS[5], '*', 'e', a.event) end
if a.decision ~= 'reject' then
  redis.call('HSET', KEYS[3], call_id, CALL.READY)
  return {'decided', redis.call('HGET', KEYS[2], call_id)}
end

-- the rejection's failure, committed
local job = job_fields(KEYS[1])
local k = {job = KEYS[1], log = KEYS[6], calls = KEYS[2], status = KEYS[3], waiting = KEYS[7],
           dependents = KEYS[8], approval = KEYS[4], events = KEYS[5], done = KEYS[9]}
write_outcome(k, call_id, CALL.FAILED, a.messages, job.expire_at_ms)
local released = release_dependents(k, call_id, job)
return committed_reply(k, cjson.decode(redis.call('HGET', KEYS[2], call_id)).awaited, job, released, nil)
