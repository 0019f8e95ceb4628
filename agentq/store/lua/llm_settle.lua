-- What a model request taught, for the whole fleet (docs/rate-limits.md): give back what it took and did not use (its
-- max_tokens beyond what it wrote, its estimated prompt beyond the real one; a negative amount takes more), learn
-- the account's limits and remaining capacity from the API's `anthropic-ratelimit-*` headers (a bucket never
-- holds more than the API says remains), and pause the model until a 429's or 529's `retry-after` is over.
-- KEYS: the model's bucket hash (see _buckets.lua)
-- ARGV: expiry of an idle bucket (ms), pause (ms, 0: none), then per kind (requests, input_tokens,
--       output_tokens): the configured limit per minute (0: none), the amount given back, the limit the headers
--       gave (-1: none), the remaining capacity they gave (-1: none)
-- Returns 1
--#include _buckets
local bucket = KEYS[1]
local now = now_ms()
for i, kind in ipairs(KINDS) do
  local base = 4 * i - 1
  local seen_limit, seen_remaining = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  if seen_limit > 0 then redis.call('HSET', bucket, kind .. '.learned', seen_limit) end
  local cap = capacity(bucket, kind, tonumber(ARGV[base]))
  local refund = tonumber(ARGV[base + 1])
  if cap > 0 and (refund ~= 0 or seen_remaining >= 0) then
    local level, from = refill(bucket, kind, cap, now)
    level = math.min(level + refund, cap)
    if seen_remaining >= 0 and seen_remaining < level then level = seen_remaining end
    set_level(bucket, kind, level, from)
  end
end
local pause = tonumber(ARGV[2])
if pause > 0 then
  local paused = tonumber(redis.call('HGET', bucket, 'paused_until') or '0')
  if now + pause > paused then redis.call('HSET', bucket, 'paused_until', now + pause) end
end
redis.call('PEXPIRE', bucket, ARGV[1])
return 1
