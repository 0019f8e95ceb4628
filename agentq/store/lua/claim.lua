-- Claim a ready call for one attempt (ready -> running) exactly once, or take over a running call
-- whose lease expired because the process running it died.
-- KEYS: job, calls, status, attempts, tools, events, log, lease, lost[, the fleet's timers: with `unstarted`]
-- ARGV: [1] the claim, a JSON object (`ClaimArgs` in store/step_args.py):
--           call_id, token, lease_ms, now (ISO),
--           job_started: the job-started envelope entry ('': none; '!': none, the caller takes the job for started),
--           log_offset (-1: no log),
--           record_sha: the SHA-1 of the call record the caller's task carried ('' for none): a record equal to the
--             stored one is left out of the reply; any other (stale, forged) gets the stored record, which is what
--             runs,
--           tool_sha: the SHA-1 of the caller's copy of the call's tool schema ('' for none): a copy equal to the
--             stored schema is left out of the reply, any other gets the stored one,
--           tool: the tool name of the caller's record (trusted only when that record is the stored one),
--           tools_at (absent: none): the `created_at` of the plan job an earlier claim found the caller's copy of the tool
--             current for ('' for none): a plan job's tools never change after its submission, so while the job
--             hash's `created_at` is that one (not a job id used again) the copy is current without reading the
--             stored schema,
--           last_call: true when the caller would finalize the job in the call's commit if it is the job's last
--             awaited call (see "what finalizing reads" below),
--           unstarted (with KEYS[10]; one Redis only: on a cluster the timers are in another slot): the member of
--             the job's `@unstarted` timer, dropped by the claim that starts a job written with one (`start_check`
--             in the job hash): it would fire a lease later and find the job started
--       [2..] the call's start events (thought, call.started), rendered by the caller for a first attempt:
--           published if this is the first attempt and both the caller's record and tool are current (it
--           rendered them from those), so the caller's start events cost no round trip of their own
-- A claim replayed with the token that holds the call's lease (the caller lost the reply of its own claim to
-- a store outage) is that same claim again: the attempt is not counted twice and nothing is published again.
-- Taking over a call whose lease expired counts one lost attempt in `lost` (its process died). Not in the first
-- lease (plus RESTART_GRACE_MS, store/step_constants.py) after a restart of the store, for a job claimed before
-- it: a lease that lapsed while the store was down says nothing about its holder, which may hold a result it
-- could not commit; it gets that long to renew its lease or commit (the store retries of engine/outages.py wait
-- at most 2 s between tries).
-- The store's run id (INFO server) is kept in the job's `store_run` field by the claim that starts the job.
-- Returns {'claimed', stored record or '', tool schema or '', attempt, log length ('' when the log offset is -1),
--          '1' if the caller's start events were published else '0', lost attempts, the job's `created_at` for a
--          plan job ('' for another, or when the caller's `tools_at` was that: what `tools_at` of a later claim
--          names), number of tail messages t,
--          t tail messages, [what finalizing reads]}
--      what finalizing reads, when last_call is true and the call is the one open awaited call of an active plan job
--      with no tick in flight: the SHA-1 of the job hash's fields (cjson of HGETALL, after this claim's writes),
--      the job hash's field count m, its m fields and values, the log's length k, its k messages, the call
--      statuses' fields and values. The caller builds the job's record from them and its own outcome, and its
--      commit finalizes the job when nothing changed meanwhile (see commit.lua).
--      or {'finished', status} | {'leased', pttl} | {'canceled'} | {'not_ready', status} | {'missing'}
--      or {'unstarted'}: the caller passed '!', but the job has not started
-- The store's run id and how long it has served (ms, counted in whole seconds), from INFO server.
local function store_run()
  local info = redis.call('INFO', 'server')
  return string.match(info, 'run_id:(%w+)'), 1000 * tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
end

-- How long a takeover of a running call whose lease lapsed must still wait (0: none): while the store has served
-- for less than a lease plus RESTART_GRACE_MS (store/step_constants.py) since a restart that came after the job's
-- first claim.
local function restart_grace_ms(lease_ms, job_run)
  local run, uptime_ms = store_run()
  if job_run == run then return 0 end
  return math.max(0, lease_ms + RESTART_GRACE_MS - uptime_ms)
end

-- Whether a call's first attempt may have created the attempts hash without an expiry (`job`: the HMGET below).
-- A plan job's attempts hash is created by the step that starts the job (this claim, or settle.lua), so it has
-- its expiry once the job started; an agent job starts with its first tick, before any claim: its hash is checked.
local function attempts_unexpiring(job)
  if not job[2] then return true end
  return job[5] ~= 'plan' and redis.call('PTTL', KEYS[4]) == -1
end

local a = cjson.decode(ARGV[1])
local call_id = a.call_id
local status = redis.call('HGET', KEYS[3], call_id)
if not status then return {'missing'} end
-- the job's fields this step reads, in one command: status, started_at, expire_at_ms, store_run, kind, open,
-- ticking, created_at, start_check
local job = redis.call('HMGET', KEYS[1], 'status', 'started_at', 'expire_at_ms', 'store_run', 'kind', 'open',
                      'ticking', 'created_at', 'start_check')
local job_status = job[1]
if job_status == JOB.CANCELED then
  -- a call that never started is canceled; one that was running at the cancel is left to its attempt while
  -- that attempt's lease lives (this task checks back later), and canceled once it was lost (its process
  -- died), as nothing else will ever end it
  if status == CALL.RUNNING then
    local pttl = redis.call('PTTL', KEYS[8])
    if pttl > 0 then return {'leased', tostring(pttl)} end
    redis.call('HSET', KEYS[3], call_id, CALL.CANCELED)
  elseif CALL_UNSTARTED[status] then
    redis.call('HSET', KEYS[3], call_id, CALL.CANCELED)
  end
  return {'canceled'}
end
if CALL_FINAL[status] then
  return {'finished', status}
end
if a.job_started == '!' then
  -- the caller takes the job for started and rendered no job.started event
  if not job[2] then
    return {'unstarted'}  -- it is not (a job id used again): nothing is written, the caller claims again
  end
  a.job_started = ''
end
local replay = false
if status == CALL.RUNNING then
  if redis.call('GET', KEYS[8]) == a.token then
    replay = true
  else
    local pttl = redis.call('PTTL', KEYS[8])
    if pttl > 0 then return {'leased', tostring(pttl)} end
    local grace = restart_grace_ms(a.lease_ms, job[4])
    if grace > 0 then return {'leased', tostring(grace)} end
  end
elseif status ~= CALL.READY then
  return {'not_ready', status}
end

local attempt
-- lost attempts: none before a call's first attempt (only a takeover, of an attempt counted before, counts one)
local lost = 0
if replay then
  attempt = tonumber(redis.call('HGET', KEYS[4], call_id))
  redis.call('PEXPIRE', KEYS[8], a.lease_ms)
else
  attempt = redis.call('HINCRBY', KEYS[4], call_id, 1)
  if attempt == 1 and attempts_unexpiring(job) then
    -- the attempts hash is created by a job's first claim, after submission set the other keys' expiry
    redis.call('PEXPIREAT', KEYS[4], job[3])
  end
  if status == CALL.RUNNING then
    lost = redis.call('HINCRBY', KEYS[9], call_id, 1)
    if lost == 1 and redis.call('PTTL', KEYS[9]) == -1 then redis.call('PEXPIREAT', KEYS[9], job[3]) end
  end
end
if attempt > 1 and lost == 0 then lost = tonumber(redis.call('HGET', KEYS[9], call_id) or '0') end
if not replay then
  redis.call('HSET', KEYS[3], call_id, CALL.RUNNING)
  redis.call('SET', KEYS[8], a.token, 'PX', a.lease_ms)
end
-- the job's first claim starts it, also when the job is awaiting approval (a call held for a reviewer since
-- its submission, the job was never `queued`): the status stays, the start is recorded and published once;
-- the job hash's fields this writes go in one command
local job_writes = {}
if job_status == JOB.QUEUED then job_writes = {'status', JOB.RUNNING} end
if not job[2] then
  local run = store_run()
  for _, v in ipairs({'started_at', a.now, 'store_run', run}) do job_writes[#job_writes + 1] = v end
end
if #job_writes > 0 then redis.call('HSET', KEYS[1], unpack(job_writes)) end
if not job[2] and job[9] == '1' and KEYS[10] then redis.call('ZREM', KEYS[10], a.unstarted) end
if not job[2] and a.job_started ~= '' then redis.call('XADD', KEYS[6], '*', 'e', a.job_started) end
local stored = redis.call('HGET', KEYS[2], call_id)
local record_current = a.record_sha ~= '' and redis.sha1hex(stored) == a.record_sha
local name = record_current and a.tool or cjson.decode(stored).tool
local plan_created = job[5] == 'plan' and job[8] or ''
local tool, tool_current = '', false
if record_current and a.tool_sha ~= '' and a.tools_at and a.tools_at ~= '' and a.tools_at == plan_created then
  tool_current = true  -- the caller's copy, found current for this very plan job by an earlier claim
  plan_created = ''  -- the caller knows it
else
  tool = redis.call('HGET', KEYS[5], name) or ''
  tool_current = a.tool_sha ~= '' and tool ~= '' and redis.sha1hex(tool) == a.tool_sha
end
local published = '0'
if attempt == 1 and record_current and tool_current and #ARGV >= 2 then
  if not replay then
    for i = 2, #ARGV do redis.call('XADD', KEYS[6], '*', 'e', ARGV[i]) end
  end
  published = '1'
end

-- the log's length and its tail from the caller's offset, only when the caller reads the log ('' otherwise)
local offset = a.log_offset
local result = {'claimed', record_current and '' or stored, tool_current and '' or tool, tostring(attempt),
                offset >= 0 and tostring(redis.call('LLEN', KEYS[7])) or '', published, tostring(lost),
                plan_created}
local tail = offset >= 0 and redis.call('LRANGE', KEYS[7], offset, -1) or {}
table.insert(result, tostring(#tail))
for _, message in ipairs(tail) do table.insert(result, message) end
if a.last_call and job[5] == 'plan' and job[6] == '1' and (job[7] or '0') == '0' and JOB_ACTIVE[job_status] then
  local fields = redis.call('HGETALL', KEYS[1])
  table.insert(result, redis.sha1hex(cjson.encode(fields)))
  table.insert(result, tostring(#fields))
  for _, v in ipairs(fields) do table.insert(result, v) end
  local log = redis.call('LRANGE', KEYS[7], 0, -1)
  table.insert(result, tostring(#log))
  for _, v in ipairs(log) do table.insert(result, v) end
  for _, v in ipairs(redis.call('HGETALL', KEYS[3])) do table.insert(result, v) end
end
return result
