-- Write calls of an agent tick's solution while the model is still streaming it; each call once.
-- KEYS: job, calls, status, waiting, dependents, approval, tick lease, events
-- ARGV: the tick's token, then 5 per call: id, record JSON, JSON list of the ids it depends on,
--       flags ('a': a reviewer must approve it, 'w': awaited), its `call.awaiting_approval` event ('' without 'a':
--       kept in the approval hash, published when the call is held, now or when what it waits on has finished)
-- A dependency that has finished meanwhile is not waited on. Returns {'ok', record of each call that is
-- ready now...} or {'superseded'} when the tick's lease is not this token's, {'finished'} for an ended job.
if redis.call('GET', KEYS[7]) ~= ARGV[1] then return {'superseded'} end
local job_status = redis.call('HGET', KEYS[1], 'status')
if not JOB_ACTIVE[job_status] then return {'finished'} end
local result = {'ok'}
local waits = false  -- a call written here waits on another: the job's `no_dependents` mark goes (see submit.lua)
for i = 2, #ARGV, 5 do
  local id, record, flags = ARGV[i], ARGV[i + 1], ARGV[i + 3]
  if redis.call('HSETNX', KEYS[2], id, record) == 1 then
    local waiting = 0
    for _, dependency in ipairs(cjson.decode(ARGV[i + 2])) do
      local s = redis.call('HGET', KEYS[3], dependency)
      if s and not CALL_FINAL[s] then
        waiting = waiting + 1
        local listed = redis.call('HGET', KEYS[5], dependency)
        local dependents = listed and cjson.decode(listed) or {}
        table.insert(dependents, id)
        redis.call('HSET', KEYS[5], dependency, cjson.encode(dependents))
        waits = true
      end
    end
    local approval = string.find(flags, 'a', 1, true) ~= nil
    if approval then redis.call('HSET', KEYS[6], id, ARGV[i + 4]) end
    if string.find(flags, 'w', 1, true) then redis.call('HINCRBY', KEYS[1], 'open', 1) end
    redis.call('HSET', KEYS[4], id, waiting)
    if waiting > 0 then
      redis.call('HSET', KEYS[3], id, CALL.PENDING)
    elseif approval then
      redis.call('HSET', KEYS[3], id, CALL.AWAITING_APPROVAL)
      redis.call('XADD', KEYS[8], '*', 'e', ARGV[i + 4])
      redis.call('HINCRBY', KEYS[1], 'awaiting', 1)
      redis.call('HSET', KEYS[1], 'status', JOB.AWAITING_APPROVAL)
    else
      redis.call('HSET', KEYS[3], id, CALL.READY)
      table.insert(result, record)
    end
  end
end
if waits then redis.call('HDEL', KEYS[1], 'no_dependents') end
local expire_at = redis.call('HGET', KEYS[1], 'expire_at_ms')
for k = 2, 6 do
  if redis.call('PTTL', KEYS[k]) == -1 then redis.call('PEXPIREAT', KEYS[k], expire_at) end
end
return result
