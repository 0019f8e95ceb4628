-- Take a model request's share of its model's rate limits for the whole fleet (docs/rate-limits.md): one request, its
-- estimated prompt, its max_tokens, each from a token bucket whose capacity is the per-minute limit, refilled
-- continuously (see _buckets.lua). A request that finds a bucket short still takes its share (the bucket goes into
-- debt) and is told when it may be sent: once every bucket is out of that debt and the model's pause, if any, is
-- over. It keeps that place: the ticket of `place` (what names the request across its attempts) is honoured when
-- it comes back, without taking again, and later requests find the debt it left and wait behind it.
-- A request let through may start in the same step: the events it starts with (a tick's `tick.started`) are
-- appended to its job's stream on 'go' only, so a deferred request has not started (one Redis only: on a cluster
-- the job's stream is in another slot, and the engine appends them itself).
-- KEYS: the model's bucket hash, its tickets (zset: place -> ms from which it may be sent)[, the job's events]
-- ARGV[1]: JSON {place, idle_ms: expiry of an idle bucket, and per kind (requests, input_tokens, output_tokens)
--          {limit: the configured limit per minute (0: none), amount}} (store/step_args.py LlmTakeArgs)
-- ARGV[2..]: the packed events to append on 'go' (with KEYS[3])
-- Returns {'go'} or {'wait', ms}
-- MINUTE_MS, HEADROOM_MS, TICKET_MAX_AGE_MS: store/step_constants.py
--#include _buckets
local a = cjson.decode(ARGV[1])
local bucket, tickets, place = KEYS[1], KEYS[2], a.place
local now = now_ms()
local function go()
  if KEYS[3] then
    for i = 2, #ARGV do redis.call('XADD', KEYS[3], '*', 'e', ARGV[i]) end
  end
  return {'go'}
end
redis.call('ZREMRANGEBYSCORE', tickets, '-inf', now - TICKET_MAX_AGE_MS)  -- tickets nobody came back for
local paused = tonumber(redis.call('HGET', bucket, 'paused_until') or '0')
local due = redis.call('ZSCORE', tickets, place)
if due then
  local at = math.max(tonumber(due), paused)
  if at <= now then
    redis.call('ZREM', tickets, place)
    return go()
  end
  return {'wait', tostring(at - now)}
end
local wait = 0
for _, kind in ipairs(KINDS) do
  local cap = capacity(bucket, kind, a[kind].limit)
  local amount = math.min(a[kind].amount, cap)
  if cap > 0 and amount > 0 then
    local level, from = refill(bucket, kind, cap, now)
    if level >= cap then from = now + HEADROOM_MS end  -- full: it refills once this request surely reached the API
    level = level - amount
    set_level(bucket, kind, level, from)
    if level < 0 then wait = math.max(wait, from - now + math.ceil(-level * MINUTE_MS / cap)) end
  end
end
local at = math.max(now + wait, paused)
redis.call('PEXPIRE', bucket, a.idle_ms)
if at > now then
  redis.call('ZADD', tickets, at, place)
  redis.call('PEXPIRE', tickets, a.idle_ms)
  return {'wait', tostring(at - now)}
end
return go()
