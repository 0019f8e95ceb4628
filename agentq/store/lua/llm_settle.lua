-- What a model request taught, for the whole fleet (docs/rate-limits.md): give back what it took and did not use (its
-- max_tokens beyond what it wrote, its estimated prompt beyond the real one; a negative amount takes more), learn
-- the account's limits and remaining capacity from the API's `anthropic-ratelimit-*` headers (a bucket never
-- holds more than the API says remains), and pause the model until a 429's or 529's `retry-after` is over.
-- KEYS: the model's bucket hash (see _buckets.lua)
-- ARGV[1]: JSON {idle_ms: expiry of an idle bucket, pause_ms: (0: none), and per kind (requests, input_tokens,
--          output_tokens) {limit: the configured limit per minute (0: none), refund: the amount given back,
--          seen_limit: the limit the headers gave (absent: none), seen_remaining: the remaining capacity they
--          gave (absent: none)}} (store/step_args.py LlmSettleArgs)
-- Returns 1
--#include _buckets
local a = cjson.decode(ARGV[1])
local bucket = KEYS[1]
local now = now_ms()
for _, kind in ipairs(KINDS) do
  local k = a[kind]
  local seen_limit, seen_remaining = k.seen_limit or -1, k.seen_remaining or -1
  if seen_limit > 0 then redis.call('HSET', bucket, kind .. '.learned', seen_limit) end
  local cap = capacity(bucket, kind, k.limit)
  local refund = k.refund
  if cap > 0 and (refund ~= 0 or seen_remaining >= 0) then
    local level, from = refill(bucket, kind, cap, now)
    level = math.min(level + refund, cap)
    if seen_remaining >= 0 and seen_remaining < level then level = seen_remaining end
    set_level(bucket, kind, level, from)
  end
end
local pause = a.pause_ms
if pause > 0 then
  local paused = tonumber(redis.call('HGET', bucket, 'paused_until') or '0')
  if now + pause > paused then redis.call('HSET', bucket, 'paused_until', now + pause) end
end
redis.call('PEXPIRE', bucket, a.idle_ms)
return 1
