-- Open a wait call (docs/waits.md): its attempt, which holds the call's lease, writes it `waiting` with what it
-- waits for, keeps the lease (without renewals) for the commit that ends the wait, and publishes `call.waiting`.
-- A waitForSignal takes the oldest signal of its name kept for the job, if any: it is woken at once.
-- KEYS: job, status, lease, waits, events, [6] the signals list of its name (waitForSignal only)
-- ARGV: call_id, token, the wait JSON, the call.waiting envelope JSON
-- Returns {'open'} | {'woken'} (a kept signal was taken) | {'gone', why} (the call is not this attempt's anymore)
local call_id = ARGV[1]
local status = redis.call('HGET', KEYS[2], call_id)
if status ~= CALL.RUNNING then return {'gone', status or 'missing'} end
if redis.call('GET', KEYS[3]) ~= ARGV[2] then return {'gone', 'superseded'} end
local expire_at = redis.call('HGET', KEYS[1], 'expire_at_ms')
redis.call('HSET', KEYS[2], call_id, CALL.WAITING)
redis.call('HSET', KEYS[4], call_id, ARGV[3])
if expire_at then
  redis.call('SET', KEYS[3], ARGV[2], 'PXAT', expire_at)
  redis.call('PEXPIREAT', KEYS[4], expire_at)
end
redis.call('XADD', KEYS[5], '*', 'e', ARGV[4])
if KEYS[6] then
  local signal = redis.call('LPOP', KEYS[6])
  if signal then
    redis.call('HSET', KEYS[4], call_id .. ':woken', '{"output":' .. signal .. '}')
    return {'woken'}
  end
end
return {'open'}
