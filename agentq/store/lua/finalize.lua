-- Give a job its final status and record exactly once, and signal its end to waiters; on a single Redis, count
-- its end for the metrics in the same step (`count_end` in _ended.lua).
-- KEYS: job, events, done[, the active jobs, the approvals, the tenant's active jobs, the job totals: with `count`]
-- ARGV: [1] the end, a JSON object (`FinalizeArgs` in store/step_args.py): status (the final status), record (the
--       job's record JSON), finished_at (ISO), event (the packed job.finished entry), count (absent: none, a
--       cluster: `EndCount`, {job, totals})
-- Returns 1, or 0 (nothing written) when the job had ended already
--#include _ended
local a = cjson.decode(ARGV[1])
local job = redis.call('HMGET', KEYS[1], 'status', 'expire_at_ms')
if not JOB_ACTIVE[job[1]] then return 0 end
end_job({job = KEYS[1], events = KEYS[2], done = KEYS[3]}, a, job[2])
count_end({KEYS[4], KEYS[5], KEYS[6], KEYS[7]}, a.count)
return 1
