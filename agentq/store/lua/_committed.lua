-- What follows the write of a call's outcome, shared by commit.lua, settle.lua and decide.lua (included by `--#include
-- _committed`). `k` names the job's keys: job, log, calls, status, waiting, dependents, approval (and, for a step
-- that may end the job, events, done, and `counted`: the metrics' keys `count_end` writes, see _ended.lua).
--#include _ended

-- The job hash's fields a commit reads, in one command: {status, kind, ticking, open, expire_at_ms, started_at,
-- no_dependents, start_check} (no_dependents: no call of the job waits on another, see submit.lua; start_check:
-- the job was written with an `@unstarted` timer, which the step that starts it drops, see settle.lua).
local function job_fields(key)
  local v = redis.call('HMGET', key, 'status', 'kind', 'ticking', 'open', 'expire_at_ms', 'started_at',
                       'no_dependents', 'start_check')
  return {status = v[1], kind = v[2], ticking = v[3] or '0', open = v[4], expire_at_ms = v[5], started_at = v[6],
          no_dependents = v[7] == '1', start_check = v[8] == '1'}
end

-- Append messages to the log (at most 1000 per command); a log this creates gets the job's expiry (every step
-- that writes the log gives it the expiry when it creates it, so a log that exists has one already). Returns the
-- log's length after the last append (nil when there was nothing to append).
local function append_log(key, messages, expire_at_ms)
  local length
  for first = 1, #messages, 1000 do
    local last = math.min(first + 999, #messages)
    length = redis.call('RPUSH', key, unpack(messages, first, last))
    if length == last then redis.call('PEXPIREAT', key, expire_at_ms) end
  end
  return length
end

-- Write a call's outcome: its log messages (ARGV[2 .. 1 + n]) appended to `k.log`, its status `status`, its events
-- (the ARGV after the messages) appended to `k.events`.
local function write_outcome(k, call_id, status, n, expire_at_ms)
  local messages = {}
  for i = 2, 1 + n do messages[#messages + 1] = ARGV[i] end
  append_log(k.log, messages, expire_at_ms)
  redis.call('HSET', k.status, call_id, status)
  for i = 2 + n, #ARGV do redis.call('XADD', k.events, '*', 'e', ARGV[i]) end
end

-- Decrement the waiting counts of the call's dependents; each that waits on nothing more becomes ready (its
-- record returned), awaiting_approval when it needs a reviewer (the job too; its `call.awaiting_approval` event,
-- rendered at submission and kept in the approval hash, is published to `k.events`), or canceled in a canceled
-- job. `job` is the job's fields (`job_fields`): its status is updated. Returns the released records.
local function release_dependents(k, call_id, job)
  local released = {}
  if job.no_dependents then return released end
  local dependents = redis.call('HGET', k.dependents, call_id)
  for _, dependent in ipairs(dependents and cjson.decode(dependents) or {}) do
    local left = redis.call('HINCRBY', k.waiting, dependent, -1)
    if left <= 0 and redis.call('HGET', k.status, dependent) == CALL.PENDING then
      local held = job.status ~= JOB.CANCELED and redis.call('HGET', k.approval, dependent)
      if job.status == JOB.CANCELED then
        redis.call('HSET', k.status, dependent, CALL.CANCELED)
      elseif held then
        redis.call('HSET', k.status, dependent, CALL.AWAITING_APPROVAL)
        if held ~= '1' then redis.call('XADD', k.events, '*', 'e', held) end  -- '1': a job written before events
        redis.call('HINCRBY', k.job, 'awaiting', 1)
        redis.call('HSET', k.job, 'status', JOB.AWAITING_APPROVAL)
        job.status = JOB.AWAITING_APPROVAL
      else
        redis.call('HSET', k.status, dependent, CALL.READY)
        table.insert(released, redis.call('HGET', k.calls, dependent))
      end
    end
  end
  return released
end

-- Give the job its final status and record, as finalize.lua does, in the commit of its last awaited call: `ending`
-- is what the caller built from what the claim sent (see commit.lua), `k.events` and `k.done` the job's keys; on
-- a single Redis (`ending.count`), the metrics' count of its end too, in `k.counted`'s keys (see _ended.lua).
local function finalize_now(k, ending, expire_at_ms)
  end_job(k, ending, expire_at_ms)
  count_end(k.counted, ending.count)
end

-- Count the call out of the job's open awaited calls (if it was `awaited`; the last one of an ended job marks its
-- saved record stale) and build the reply:
-- {'committed', open awaited calls, job status, '1' while an agent tick is in flight else '0', job kind,
--  number of released calls n, record of each released call..., then, when this was the last awaited call of an
--  active plan job with no tick in flight: 'finalized' when `ending` (the job's end the caller built, see
--  commit.lua) was written, else the job hash's field count m, its m fields and values, the log's length k, its
--  k messages, the call statuses' fields and values}
local function committed_reply(k, awaited, job, released, ending)
  local open
  if awaited then
    open = redis.call('HINCRBY', k.job, 'open', -1)
  else
    open = tonumber(job.open)
  end
  local job_status, kind, ticking = job.status, job.kind, job.ticking
  if awaited and open <= 0 and not JOB_ACTIVE[job_status] then
    -- the last awaited call of a job that ended while it ran: the record saved at the end lacks its outcome, so
    -- readers compute the record from the log until its caller saves the record again (`record_stale`)
    redis.call('HSET', k.job, 'record_stale', '1')
  end
  local result = {'committed', tostring(open), job_status, ticking, kind, tostring(#released)}
  for _, r in ipairs(released) do table.insert(result, r) end
  if open <= 0 and kind == 'plan' and JOB_ACTIVE[job_status] and ticking == '0' and ending then
    finalize_now(k, ending, job.expire_at_ms)
    table.insert(result, 'finalized')
  elseif open <= 0 and kind == 'plan' and JOB_ACTIVE[job_status] and ticking == '0' then
    -- a plan job's last awaited call: its caller finalizes the job next, with what it would read (job, log,
    -- call statuses) sent in this reply instead of a round trip of its own (the job hash holds the hot fields
    -- only: the submitted job and the rest of its cold spec are in the spec key)
    local fields = redis.call('HGETALL', k.job)
    table.insert(result, tostring(#fields))
    for _, v in ipairs(fields) do table.insert(result, v) end
    local log = redis.call('LRANGE', k.log, 0, -1)
    table.insert(result, tostring(#log))
    for _, v in ipairs(log) do table.insert(result, v) end
    for _, v in ipairs(redis.call('HGETALL', k.status)) do table.insert(result, v) end
  end
  return result
end
