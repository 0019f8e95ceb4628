-- Take the webhook deliveries that are due: each is moved a lease ahead, so no other process takes it meanwhile
-- and a process that dies mid-attempt leaves it to be taken again when the lease ends.
-- (webhooks/store.py's `DeliveryStore.claim_due`, docs/webhooks.md)
-- KEYS: agentq:webhooks:due (zset: "<job> <delivery>" -> due time, ms)
-- ARGV: now (ms), lease (ms), how many at most
-- Returns the members taken
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local until_ms = tonumber(ARGV[1]) + tonumber(ARGV[2])
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', until_ms, member)
end
return due
