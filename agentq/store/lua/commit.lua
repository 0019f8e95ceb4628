-- Commit the outcome of a running call exactly once: append its messages, set its final status,
-- publish its events, and release the calls that waited only on it.
-- KEYS: job, log, calls, status, waiting, events, lease, dependents, approval
-- ARGV: call_id, token, final status (done|failed|skipped), number of messages n, then n message JSONs,
--       then the event envelope JSONs
-- A released call that needs approval goes to awaiting_approval instead of ready (and is not returned).
-- The outcome of a call that ends after its job was canceled is still written, marked as late: each message
-- gets `"_afterCancel": true` and each event `"after_cancel": true` (both are JSON objects: the field is
-- inserted before their closing brace).
-- Returns {'committed', open awaited calls, job status, '1' while an agent tick is in flight else '0', job kind,
--          number of released calls n, record of each released call..., then, when this was the last awaited
--          call of an active plan job with no tick in flight: the job hash's field count m, its m fields and
--          values, the log's length k, its k messages, the call statuses' fields and values}
--      or {'duplicate', status} when this call was already committed (a redelivered task)
--      or {'superseded'} when another attempt took the call over after this one's lease expired
local call_id = ARGV[1]
local status = redis.call('HGET', KEYS[4], call_id)
if status ~= CALL.RUNNING then return {'duplicate', status or ''} end
local holder = redis.call('GET', KEYS[7])
if holder and holder ~= ARGV[2] then return {'superseded'} end

local job_status = redis.call('HGET', KEYS[1], 'status')
local late = job_status == JOB.CANCELED
local function mark(json, field)
  if late then return string.sub(json, 1, -2) .. ',"' .. field .. '":true}' end
  return json
end
local n = tonumber(ARGV[4])
for i = 5, 4 + n do redis.call('RPUSH', KEYS[2], mark(ARGV[i], '_afterCancel')) end
if n > 0 and redis.call('PTTL', KEYS[2]) == -1 then
  redis.call('PEXPIREAT', KEYS[2], redis.call('HGET', KEYS[1], 'expire_at_ms'))
end
redis.call('HSET', KEYS[4], call_id, ARGV[3])
redis.call('DEL', KEYS[7])
for i = 5 + n, #ARGV do redis.call('XADD', KEYS[6], '*', 'e', mark(ARGV[i], 'after_cancel')) end

local record = cjson.decode(redis.call('HGET', KEYS[3], call_id))
local released = {}
local dependents = redis.call('HGET', KEYS[8], call_id)
for _, dependent in ipairs(dependents and cjson.decode(dependents) or {}) do
  local left = redis.call('HINCRBY', KEYS[5], dependent, -1)
  if left <= 0 and redis.call('HGET', KEYS[4], dependent) == CALL.PENDING then
    if job_status == JOB.CANCELED then
      redis.call('HSET', KEYS[4], dependent, CALL.CANCELED)
    elseif redis.call('HEXISTS', KEYS[9], dependent) == 1 then
      redis.call('HSET', KEYS[4], dependent, CALL.AWAITING_APPROVAL)
      redis.call('HINCRBY', KEYS[1], 'awaiting', 1)
      redis.call('HSET', KEYS[1], 'status', JOB.AWAITING_APPROVAL)
      job_status = JOB.AWAITING_APPROVAL
    else
      redis.call('HSET', KEYS[4], dependent, CALL.READY)
      table.insert(released, redis.call('HGET', KEYS[3], dependent))
    end
  end
end
local open
if record.awaited then
  open = redis.call('HINCRBY', KEYS[1], 'open', -1)
else
  open = tonumber(redis.call('HGET', KEYS[1], 'open'))
end
local kind = redis.call('HGET', KEYS[1], 'kind')
local ticking = redis.call('HGET', KEYS[1], 'ticking') or '0'
local result = {'committed', tostring(open), job_status, ticking, kind, tostring(#released)}
for _, r in ipairs(released) do table.insert(result, r) end
if open <= 0 and kind == 'plan' and JOB_ACTIVE[job_status] and ticking == '0' then
  -- a plan job's last awaited call: its caller finalizes the job next, with what it would read (job, log,
  -- call statuses) sent in this reply instead of a round trip of its own
  local job = redis.call('HGETALL', KEYS[1])
  table.insert(result, tostring(#job))
  for _, v in ipairs(job) do table.insert(result, v) end
  local log = redis.call('LRANGE', KEYS[2], 0, -1)
  table.insert(result, tostring(#log))
  for _, v in ipairs(log) do table.insert(result, v) end
  for _, v in ipairs(redis.call('HGETALL', KEYS[4])) do table.insert(result, v) end
end
return result
