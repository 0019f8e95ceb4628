-- A reviewer's decision on a call awaiting approval (docs/protocol.md#approvals).
-- KEYS: job, calls, status, approval, lease, events
-- ARGV: call_id, decision ('approve' | 'edit' | 'reject'), the edited record JSON ('' unless edit),
--       token and lease_ms (reject: the call is held by that token until its failure is committed), event JSON
-- Returns {'decided', record JSON} or {'conflict', status} | {'missing'}
local call_id = ARGV[1]
local status = redis.call('HGET', KEYS[3], call_id)
if not status then return {'missing'} end
local job_status = redis.call('HGET', KEYS[1], 'status')
if status ~= CALL.AWAITING_APPROVAL or not JOB_ACTIVE[job_status] then return {'conflict', status} end
if ARGV[2] == 'edit' then redis.call('HSET', KEYS[2], call_id, ARGV[3]) end
if ARGV[2] == 'reject' then
  redis.call('HSET', KEYS[3], call_id, CALL.RUNNING)
  redis.call('SET', KEYS[5], ARGV[4], 'PX', ARGV[5])
else
  redis.call('HSET', KEYS[3], call_id, CALL.READY)
end
redis.call('HDEL', KEYS[4], call_id)
if redis.call('HINCRBY', KEYS[1], 'awaiting', -1) <= 0 and job_status == JOB.AWAITING_APPROVAL then
  redis.call('HSET', KEYS[1], 'status', JOB.RUNNING)
end
if ARGV[6] ~= '' then redis.call('XADD', KEYS[6], '*', 'e', ARGV[6]) end
return {'decided', redis.call('HGET', KEYS[2], call_id)}
