-- Admit a job of a tenant that has limits (docs/tenants.md), before it is written: at most `max_active` of its jobs
-- active at once (the active set holds each admitted job until it ends or expires), and a rate of jobs by GCRA
-- (a burst of `burst`, then one every `interval` ms). Nothing changes when the job is refused.
-- KEYS: the tenant's active set (zset: job id -> its expiry, s), the tenant's rate (hash: `tat`, ms)
-- ARGV[1]: JSON {job_id, expire_at_s: its expiry (s), max_active (0: none), interval_ms (0: none), burst}
--          (store/step_args.py TenantAdmitArgs)
-- Returns {0, 0} admitted; {1, 0} refused: max_active jobs are active; {2, ms} refused: the rate, try again in ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local a = cjson.decode(ARGV[1])
local active, rate = KEYS[1], KEYS[2]
local max_active, interval = a.max_active, a.interval_ms
if max_active > 0 then
  redis.call('ZREMRANGEBYSCORE', active, '-inf', now / 1000)  -- jobs that expired without ending
  if redis.call('ZCARD', active) >= max_active and not redis.call('ZSCORE', active, a.job_id) then
    return {1, 0}
  end
end
if interval > 0 then
  local tat = math.max(tonumber(redis.call('HGET', rate, 'tat') or '0'), now)
  local tolerance = interval * (a.burst - 1)
  if tat - now > tolerance then return {2, tat - now - tolerance} end
  redis.call('HSET', rate, 'tat', tat + interval)
  redis.call('PEXPIRE', rate, tat + interval - now + 1000)
end
if max_active > 0 then
  redis.call('ZADD', active, a.expire_at_s, a.job_id)
  local last = tonumber(redis.call('ZRANGE', active, -1, -1, 'WITHSCORES')[2])
  redis.call('PEXPIREAT', active, math.ceil(last * 1000))  -- the set goes with its last job
end
return {0, 0}
