-- A job's end, shared by finalize.lua and the commit that ends a job (`finalize_now` in _committed.lua; included by
-- `--#include _ended`).

-- Write the job's final status and record, publish its job.finished, push the status onto `done` (the end signal
-- its waiters block on, expiring with the job at `expire_at_ms`). `ending`: {status, record (JSON), finished_at,
-- event (the packed job.finished entry)}; `k`: the job's keys job, events, done.
local function end_job(k, ending, expire_at_ms)
  redis.call('HSET', k.job, 'status', ending.status, 'record', ending.record, 'finished_at', ending.finished_at)
  redis.call('XADD', k.events, '*', 'e', ending.event)
  redis.call('DEL', k.done)
  redis.call('RPUSH', k.done, ending.status)
  if expire_at_ms then redis.call('PEXPIREAT', k.done, expire_at_ms) end
end

-- The metrics' count of the job's end (`JobCounts.count_end` in store/stats.py; `EndCount` in
-- store/step_args.py), on a single Redis only, where the fleet-wide keys are the step's to write too: out of the
-- active, approvals and tenant's active sets, counted once under its final status. `count`: {job: the job's id,
-- totals: the two fields of the totals to count it in}, nil on a cluster (the caller counts it after the step);
-- `keys`: the active set, the approvals set, the tenant's active set, the totals hash.
local function count_end(keys, count)
  if not count then return end
  for i = 1, 3 do redis.call('ZREM', keys[i], count.job) end
  for _, field in ipairs(count.totals) do redis.call('HINCRBY', keys[4], field, 1) end
end
