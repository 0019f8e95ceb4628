-- Replace the claim of a Celery node name when it still holds the expected holder (or nothing, when asked):
-- a takeover of a claim left by a process that no longer runs, and a renewal that never steals a claim.
-- KEYS: node
-- ARGV: expected holder, new holder, ttl ms, '1' to take an absent claim too
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] or (not held and ARGV[4] == '1') then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
