-- Commit the outcome of a running call exactly once: append its messages, set its final status,
-- publish its events, and release the calls that waited only on it.
-- KEYS: job, log, calls, status, waiting, events, lease, dependents, approval
-- ARGV: call_id, token, final status (done|failed|skipped), whether the call is awaited ('1' or '0', from the
--       caller's copy of the stored record: the claim gave it; '': read the stored record), number of messages n,
--       then n message JSONs, then the event envelope JSONs
-- A released call that needs approval goes to awaiting_approval instead of ready (and is not returned).
-- The outcome of a call that ends after its job was canceled is still written, marked as late: each message
-- gets `"_afterCancel": true` and each event `"after_cancel": true` (both are JSON objects: the field is
-- inserted before their closing brace).
-- Returns {'committed', ...} as `committed_reply` in _committed.lua builds it (open awaited calls, job status,
--          tick in flight, job kind, the released calls' records, and what finalizing a plan job reads when
--          this was its last awaited call)
--      or {'duplicate', status} when this call was already committed (a redelivered task)
--      or {'superseded'} when another attempt took the call over after this one's lease expired
--#include _committed
local call_id = ARGV[1]
local status = redis.call('HGET', KEYS[4], call_id)
if status ~= CALL.RUNNING then return {'duplicate', status or ''} end
local holder = redis.call('GET', KEYS[7])
if holder and holder ~= ARGV[2] then return {'superseded'} end

local job = job_fields(KEYS[1])
local late = job.status == JOB.CANCELED
local function mark(json, field)
  if late then return string.sub(json, 1, -2) .. ',"' .. field .. '":true}' end
  return json
end
local n = tonumber(ARGV[5])
local messages = {}
for i = 6, 5 + n do messages[#messages + 1] = mark(ARGV[i], '_afterCancel') end
append_log(KEYS[2], messages, job.expire_at_ms)
redis.call('HSET', KEYS[4], call_id, ARGV[3])
redis.call('DEL', KEYS[7])
for i = 6 + n, #ARGV do redis.call('XADD', KEYS[6], '*', 'e', mark(ARGV[i], 'after_cancel')) end

local k = {job = KEYS[1], log = KEYS[2], calls = KEYS[3], status = KEYS[4], waiting = KEYS[5],
           dependents = KEYS[8], approval = KEYS[9]}
local released = release_dependents(k, call_id, job)
local awaited = ARGV[4] == '1'
if ARGV[4] == '' then awaited = cjson.decode(redis.call('HGET', KEYS[3], call_id)).awaited end
return committed_reply(k, awaited, job, released)
