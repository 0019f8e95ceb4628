-- Extend the leases this process holds; a lease another attempt took over is left alone.
-- KEYS: lease keys; ARGV: lease_ms, then one token per key
local renewed = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    renewed = renewed + 1
  end
end
return renewed
