-- A reviewer's decision on a call awaiting approval (docs/protocol.md#approvals).
-- KEYS: job, calls, status, approval, lease, events
-- ARGV: [1] the decision, a JSON object (`DecideArgs` in store/step_args.py): call_id, decision ('approve' |
--       'edit' | 'reject'), record (the edited record JSON; '' unless edit), token and lease_ms (reject: the call is
--       held by that token until its failure is committed), event (the envelope entry to publish; '': none)
-- Returns {'decided', record JSON} or {'conflict', status} | {'missing'}
local a = cjson.decode(ARGV[1])
local call_id = a.call_id
local status = redis.call('HGET', KEYS[3], call_id)
if not status then return {'missing'} end
local job_status = redis.call('HGET', KEYS[1], 'status')
if status ~= CALL.AWAITING_APPROVAL or not JOB_ACTIVE[job_status] then return {'conflict', status} end
if a.decision == 'edit' then redis.call('HSET', KEYS[2], call_id, a.record) end
if a.decision == 'reject' then
  redis.call('HSET', KEYS[3], call_id, CALL.RUNNING)
  redis.call('SET', KEYS[5], a.token, 'PX', a.lease_ms)
else
  redis.call('HSET', KEYS[3], call_id, CALL.READY)
end
redis.call('HDEL', KEYS[4], call_id)
if redis.call('HINCRBY', KEYS[1], 'awaiting', -1) <= 0 and job_status == JOB.AWAITING_APPROVAL then
  redis.call('HSET', KEYS[1], 'status', JOB.RUNNING)
end
if a.event ~= '' then redis.call('XADD', KEYS[6], '*', 'e', a.event) end
return {'decided', redis.call('HGET', KEYS[2], call_id)}
