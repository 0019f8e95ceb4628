-- Begin an agent tick: one model request of a job, at most one in flight.
-- KEYS: job, tick lease, exchanges, events, log, spec[, the fleet's timers (one Redis only: on a cluster another
--       slot)]
-- ARGV: [1] the claim, a JSON object (`TickBeginArgs` in store/step_args.py): exchanges (the number of exchanges
--       the tick expects to find: a stale task finds more), token, lease_ms, now (ISO), job_started (the
--       job-started envelope entry; '': none), read_from (absent: no read): {log, exchanges}, where the tick's
--       read of its inputs starts in the log and in the exchanges, unstarted (with KEYS[7]): the member of the
--       job's `@unstarted` timer, dropped by the tick that starts the job (its first tasks were sent: the timer
--       would find it started and do nothing, after a round trip to take it and one to read the job)
-- A replay with the token that holds the tick's lease is the same claim again.
-- Returns {'claimed', attempt of this request[, the job hash (flat), the log from there, the exchanges from
--          there, the spec's `registered` or '']}
--      or {'finished', status} | {'stale'} | {'leased', pttl} | {'busy', open calls}
local a = cjson.decode(ARGV[1])
local function claimed(attempt)
  local from = a.read_from
  if not from then return {'claimed', attempt} end
  return {'claimed', attempt, redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[5], from.log, -1),
          redis.call('LRANGE', KEYS[3], from.exchanges, -1), redis.call('HGET', KEYS[6], 'registered') or ''}
end
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'missing'} end
if not JOB_ACTIVE[status] then return {'finished', status} end
if redis.call('LLEN', KEYS[3]) ~= a.exchanges then return {'stale'} end
-- the same tick's claim again, with its own token (its reply was lost to a store outage)
if redis.call('GET', KEYS[2]) == a.token then
  return claimed(redis.call('HGET', KEYS[1], 'tick_attempt') or '1')
end
local pttl = redis.call('PTTL', KEYS[2])
if pttl > 0 then return {'leased', tostring(pttl)} end
-- a fresh request waits for the calls of the previous one; a retry of the same request (an attempt was made:
-- its calls streamed so far may still run) does not
local open = tonumber(redis.call('HGET', KEYS[1], 'open') or '0')
local tried = tonumber(redis.call('HGET', KEYS[1], 'tick_attempt') or '0')
if open > 0 and tried == 0 then return {'busy', tostring(open)} end
redis.call('SET', KEYS[2], a.token, 'PX', a.lease_ms)
redis.call('HSET', KEYS[1], 'ticking', '1')
local attempt = redis.call('HINCRBY', KEYS[1], 'tick_attempt', 1)
if status == JOB.QUEUED then
  redis.call('HSET', KEYS[1], 'status', JOB.RUNNING, 'started_at', a.now)
  if a.job_started ~= '' then redis.call('XADD', KEYS[4], '*', 'e', a.job_started) end
  if KEYS[7] then redis.call('ZREM', KEYS[7], a.unstarted) end
end
return claimed(tostring(attempt))
