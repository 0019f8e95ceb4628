-- Take the due timers of open waits (docs/waits.md) for one dispatcher: each taken entry's due time moves a claim
-- ahead, so no other dispatcher takes it meanwhile, and a dispatcher that dies before it fired the wait leaves
-- it to be taken again once the claim runs out (the wait's decision and commit happen once: wait_take.lua,
-- commit.lua).
-- KEYS: timers
-- ARGV: now (unix ms), how many at most, the claim (ms)
-- Returns the members taken (`<job> <call>`)
local taken = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local until_ms = tonumber(ARGV[1]) + tonumber(ARGV[3])
for _, member in ipairs(taken) do redis.call('ZADD', KEYS[1], 'XX', until_ms, member) end
return taken
