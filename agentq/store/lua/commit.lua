-- Commit the outcome of a running (or waiting: docs/waits.md) call exactly once: append its messages, set its final status,
-- publish its events, and release the calls that waited only on it.
-- KEYS: job, log, calls, status, waiting, events, lease, dependents, approval, done[, the active jobs, the
--       approvals, the tenant's active jobs, the job totals: with `ending.count`]
-- ARGV: [1] the commit, a JSON object (`CommitArgs` in store/step_args.py):
--           call_id, token, status: the final status (done|failed|skipped),
--           awaited: whether the call is awaited (from the caller's copy of the stored record: the claim gave it;
--             absent: read the stored record),
--           ending (absent: none): the job's end the caller built from what its claim sent (claim.lua: the last
--             awaited call of a plan job) and this outcome: digest (the SHA-1 the claim sent of the job hash's
--             fields), log_length (the log's length the claim sent), status (the job's final status), record
--             (its JSON), finished_at (ISO), event (the job.finished envelope entry); written here, as
--             finalize.lua would, when this commit ends the job and the job hash and the log are as the claim
--             read them plus this outcome (else the reply brings what finalizing reads); and, on a single Redis,
--             count ({job, totals}, `EndCount`; absent on a cluster): the metrics' count of the job's end, written
--             with it in KEYS[11..14] (`count_end` in _ended.lua),
--           messages: the number n of messages,
--           lease_ms (absent: LEASE_KEPT_MS): the caller's lease length, given back to another attempt that took
--             the call over
--       [2..] n message JSONs, then the event envelope JSONs
-- A released call that needs approval goes to awaiting_approval instead of ready (and is not returned).
-- The outcome of a call that ends after its job was canceled is still written, marked as late: each message
-- gets `"_afterCancel": true` and each event `"after_cancel": true` (both are JSON objects: the field is
-- inserted before their closing brace).
-- Returns {'committed', ...} as `committed_reply` in _committed.lua builds it (open awaited calls, job status,
--          tick in flight, job kind, the released calls' records, and, when this was the last awaited call of a
--          plan job, 'finalized' if the caller's ending was written, else what finalizing the job reads)
--      or {'duplicate', status} when this call was already committed (a redelivered task)
--      or {'superseded'} when another attempt took the call over after this one's lease expired
--#include _committed
local a = cjson.decode(ARGV[1])
local call_id = a.call_id
local status = redis.call('HGET', KEYS[4], call_id)
if status ~= CALL.RUNNING and status ~= CALL.WAITING then return {'duplicate', status or ''} end
-- the lease ends with this commit: read and deleted in one command; another attempt's lease (it took the call
-- over after this one's lapsed) is given back to it, a whole lease long (the caller's, else LEASE_KEPT_MS; its
-- holder's next renewal sets its own)
local holder = redis.call('GETDEL', KEYS[7])
if holder and holder ~= a.token then
  redis.call('SET', KEYS[7], holder, 'PX', (a.lease_ms or 0) > 0 and a.lease_ms or LEASE_KEPT_MS)
  return {'superseded'}
end

local job = job_fields(KEYS[1])
-- the caller's ending holds only if the job hash is the one its claim read (nothing else wrote it since)
local ending = a.ending
if ending and redis.sha1hex(cjson.encode(redis.call('HGETALL', KEYS[1]))) ~= ending.digest then ending = nil end
local late = job.status == JOB.CANCELED
local function mark(json, field)
  if late then return string.sub(json, 1, -2) .. ',"' .. field .. '":true}' end
  return json
end
local n = a.messages
local messages = {}
for i = 2, 1 + n do messages[#messages + 1] = mark(ARGV[i], '_afterCancel') end
local length = append_log(KEYS[2], messages, job.expire_at_ms)
-- ... and the log the one its claim read, plus this outcome's messages
if ending and (length or redis.call('LLEN', KEYS[2])) ~= ending.log_length + n then ending = nil end
redis.call('HSET', KEYS[4], call_id, a.status)
for i = 2 + n, #ARGV do redis.call('XADD', KEYS[6], '*', 'e', mark(ARGV[i], 'after_cancel')) end

local k = {job = KEYS[1], log = KEYS[2], calls = KEYS[3], status = KEYS[4], waiting = KEYS[5],
           dependents = KEYS[8], approval = KEYS[9], events = KEYS[6], done = KEYS[10],
           counted = {KEYS[11], KEYS[12], KEYS[13], KEYS[14]}}
local released = release_dependents(k, call_id, job)
local awaited = a.awaited
if awaited == nil then awaited = cjson.decode(redis.call('HGET', KEYS[3], call_id)).awaited end
return committed_reply(k, awaited, job, released, ending)
