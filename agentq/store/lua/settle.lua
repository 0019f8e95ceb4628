-- Claim and commit, in one step, the first attempt of a ready call whose handler already ran: the path of an
-- activity registered `idempotent` (its task's record is signed by the dispatcher, it reads nothing from the
-- log). The caller ran the handler with the record its task carried and rendered the attempt's events and
-- messages from that record and its copy of the call's tool; both are checked here before anything is written.
-- KEYS: job, calls, status, attempts, tools, events, log, waiting, dependents, approval[, the fleet's timers: with
--       `unstarted`]
-- ARGV: [1] the attempt, a JSON object (`SettleArgs` in store/step_args.py): call_id, record_sha (SHA-1 of the
--           caller's record), tool (its name), tool_sha (SHA-1 of the caller's tool), now (ISO), job_started (the
--           job-started envelope entry; '!': none, the caller takes the job for started), status (the final
--           status), messages (their number n), unstarted (with KEYS[11], one Redis only): the member of the
--           job's `@unstarted` timer, dropped when this step starts a job written with one (as claim.lua)
--       [2..] n message JSONs, then the event envelope JSONs (start events, then the finish event)
-- Returns what commit.lua returns ({'committed', open awaited calls, job status, ticking, job kind, released
-- calls..., and what finalizing a plan job reads when this was its last awaited call}), or, writing nothing:
--      {'other'}: not the first attempt of a ready call of an active job, or not the stored record (the caller
--                 takes the usual path: claim, then commit),
--      {'stale_tool', stored tool JSON}: the caller's tool is not the job's (it renders its events again),
--      {'unstarted'}: the caller passed '!' but the job has not started.
--#include _committed
local a = cjson.decode(ARGV[1])
local call_id = a.call_id
if redis.call('HGET', KEYS[3], call_id) ~= CALL.READY then return {'other'} end
local job = job_fields(KEYS[1])
if not JOB_ACTIVE[job.status] then return {'other'} end
if redis.call('HEXISTS', KEYS[4], call_id) == 1 then return {'other'} end  -- an attempt ran before
local stored = redis.call('HGET', KEYS[2], call_id)
if redis.sha1hex(stored) ~= a.record_sha then return {'other'} end
local tool = redis.call('HGET', KEYS[5], a.tool)
if not tool then return {'other'} end
if redis.sha1hex(tool) ~= a.tool_sha then return {'stale_tool', tool} end
local started = job.started_at ~= false
if a.job_started == '!' and not started then return {'unstarted'} end

-- the claim: attempt 1, the job running and started
redis.call('HSET', KEYS[4], call_id, 1)
-- the attempts hash gets the job's expiry when this step creates it: when it starts a plan job (see claim.lua)
if not started or (job.kind ~= 'plan' and redis.call('PTTL', KEYS[4]) == -1) then
  redis.call('PEXPIREAT', KEYS[4], job.expire_at_ms)
end
if job.status == JOB.QUEUED then
  redis.call('HSET', KEYS[1], 'status', JOB.RUNNING)
  job.status = JOB.RUNNING
end
if not started then
  redis.call('HSET', KEYS[1], 'started_at', a.now)
  if a.job_started ~= '!' and a.job_started ~= '' then redis.call('XADD', KEYS[6], '*', 'e', a.job_started) end
  if job.start_check and KEYS[11] then redis.call('ZREM', KEYS[11], a.unstarted) end
end

-- the commit
local k = {job = KEYS[1], log = KEYS[7], calls = KEYS[2], status = KEYS[3], waiting = KEYS[8],
           dependents = KEYS[9], approval = KEYS[10], events = KEYS[6]}
write_outcome(k, call_id, a.status, a.messages, job.expire_at_ms)
local released = release_dependents(k, call_id, job)
return committed_reply(k, cjson.decode(stored).awaited, job, released)
