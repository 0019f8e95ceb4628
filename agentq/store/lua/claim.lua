-- Claim a ready call for one attempt (ready -> running) exactly once, or take over a running call
-- whose lease expired because the process running it died.
-- KEYS: job, calls, status, attempts, tools, events, log, lease
-- ARGV: call_id, token, lease_ms, now (ISO), job-started envelope JSON, log offset (-1: no log),
--       [7] 'r' when the caller has the call record (it is left out of the reply),
--       [8] the call's tool name and [9] the SHA-1 of the caller's copy of that tool's schema ('' for none):
--           a copy equal to the stored schema is left out of the reply, any other gets the stored one,
--       [10..] the call's start events (thought, call.started), rendered by the caller for a first attempt:
--           published if this is the first attempt and the caller's copy of the tool is current (it rendered
--           them with it), so the caller's start events cost no round trip of their own
-- Returns {'claimed', record or '', tool schema or '', attempt, log length, '1' if the caller's start events
--          were published else '0', tail messages...}
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
local have_record = ARGV[7] == 'r'
local name, tool_sha = ARGV[8] or '', ARGV[9] or ''
local record = ''
if not have_record or name == '' then
  record = redis.call('HGET', KEYS[2], call_id)
  if name == '' then name = cjson.decode(record).tool end
  if have_record then record = '' end
end
local tool = redis.call('HGET', KEYS[5], name) or ''
local tool_current = tool_sha ~= '' and tool ~= '' and redis.sha1hex(tool) == tool_sha
if tool_current then tool = '' end
local published = '0'
if attempt == 1 and tool_current and #ARGV >= 10 then
  for i = 10, #ARGV do redis.call('XADD', KEYS[6], '*', 'e', ARGV[i]) end
  published = '1'
end

local offset = tonumber(ARGV[6])
local result = {'claimed', record, tool, tostring(attempt), tostring(redis.call('LLEN', KEYS[7])), published}
if offset >= 0 then
  for _, message in ipairs(redis.call('LRANGE', KEYS[7], offset, -1)) do table.insert(result, message) end
end
return result
