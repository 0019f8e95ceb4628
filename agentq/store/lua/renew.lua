-- Extend the leases this process holds; a lease another attempt took over is left alone.
-- A lease that lapsed (its key is gone) while its call still runs is made again for its token: nobody took the
-- call over, and its holder is alive (it renews), back from a store outage or a pause longer than the lease;
-- its outcome commits all the same (commit.lua).
-- KEYS: status, then lease keys; ARGV: lease_ms, then one token per lease key, then one call id per lease key
local n = #KEYS - 1
local renewed = 0
for i = 1, n do
  local lease, token = KEYS[i + 1], ARGV[i + 1]
  local holder = redis.call('GET', lease)
  if holder == token then
    redis.call('PEXPIRE', lease, ARGV[1])
    renewed = renewed + 1
  elseif not holder and redis.call('HGET', KEYS[1], ARGV[n + 1 + i]) == CALL.RUNNING then
    redis.call('SET', lease, token, 'PX', ARGV[1])
    renewed = renewed + 1
  end
end
return renewed
