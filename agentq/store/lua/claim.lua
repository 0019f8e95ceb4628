-- Claim a ready call for one attempt (ready -> running) exactly once, or take over a running call
-- whose lease expired because the process running it died.
-- KEYS: job, calls, status, attempts, tools, events, log, lease
-- ARGV: call_id, token, lease_ms, now (ISO), job-started envelope JSON, log offset (-1: no log),
--       [7] what the caller has already: 'r' (the call record) and/or 't' (the tool schema) leave them out
--           of the reply; for a first attempt only: [8] a thought envelope JSON ('' for none), [9], [10] head
--           and tail of a call.started envelope ('' for none), published as head .. '1' .. tail, so the
--           caller's start events cost no round trip of their own (a later attempt publishes its own)
-- Returns {'claimed', record or '', tool schema or '', attempt, log length, tail messages...}
--      or {'finished', status} | {'leased', pttl} | {'canceled'} | {'not_ready', status} | {'missing'}
local call_id = ARGV[1]
local status = redis.call('HGET', KEYS[3], call_id)
if not status then return {'missing'} end
local job_status = redis.call('HGET', KEYS[1], 'status')
if job_status == 'canceled' then
  if status == 'pending' or status == 'ready' then redis.call('HSET', KEYS[3], call_id, 'canceled') end
  return {'canceled'}
end
if status == 'done' or status == 'failed' or status == 'skipped' or status == 'canceled' then
  return {'finished', status}
end
if status == 'running' then
  local pttl = redis.call('PTTL', KEYS[8])
  if pttl > 0 then return {'leased', tostring(pttl)} end
elseif status ~= 'ready' then
  return {'not_ready', status}
end

local attempt = redis.call('HINCRBY', KEYS[4], call_id, 1)
if attempt == 1 and redis.call('PTTL', KEYS[4]) == -1 then
  -- the attempts hash is created by a job's first claim, after submission set the other keys' expiry
  redis.call('PEXPIREAT', KEYS[4], redis.call('HGET', KEYS[1], 'expire_at_ms'))
end
redis.call('HSET', KEYS[3], call_id, 'running')
redis.call('SET', KEYS[8], ARGV[2], 'PX', ARGV[3])
if job_status == 'queued' then
  redis.call('HSET', KEYS[1], 'status', 'running', 'started_at', ARGV[4])
  if ARGV[5] ~= '' then redis.call('XADD', KEYS[6], '*', 'e', ARGV[5]) end
end
if attempt == 1 then
  if ARGV[8] and ARGV[8] ~= '' then redis.call('XADD', KEYS[6], '*', 'e', ARGV[8]) end
  if ARGV[9] and ARGV[9] ~= '' then redis.call('XADD', KEYS[6], '*', 'e', ARGV[9] .. '1' .. ARGV[10]) end
end

local have = ARGV[7] or ''
local record, tool = '', ''
if not string.find(have, 'r', 1, true) or not string.find(have, 't', 1, true) then
  record = redis.call('HGET', KEYS[2], call_id)
  if not string.find(have, 't', 1, true) then
    tool = redis.call('HGET', KEYS[5], cjson.decode(record).tool) or ''
  end
  if string.find(have, 'r', 1, true) then record = '' end
end
local offset = tonumber(ARGV[6])
local result = {'claimed', record, tool, tostring(attempt), tostring(redis.call('LLEN', KEYS[7]))}
if offset >= 0 then
  for _, message in ipairs(redis.call('LRANGE', KEYS[7], offset, -1)) do table.insert(result, message) end
end
return result
