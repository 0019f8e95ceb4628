-- A model's rate-limit buckets (docs/rate-limits.md), shared by llm_take.lua and llm_settle.lua (`--#include _buckets`).
-- The model's bucket hash holds, per kind (requests, input_tokens, output_tokens): `<kind>.level` (what the
-- bucket holds; below 0 it is in debt to requests told to wait), `<kind>.at` (ms from which that level refills),
-- `<kind>.learned` (the limit the API's `anthropic-ratelimit-*` headers last gave); and `paused_until` (ms: a
-- 429 or 529 paused the model for the fleet until then).
local KINDS = {'requests', 'input_tokens', 'output_tokens'}

-- The server's clock in ms: one clock for every process of the fleet.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A kind's capacity per minute: the configured limit, lowered to the account's own when its headers gave a lower
-- one (or that one alone when none is configured); 0: not limited.
local function capacity(bucket, kind, configured)
  local learned = tonumber(redis.call('HGET', bucket, kind .. '.learned') or '0')
  if configured > 0 and learned > 0 then return math.min(configured, learned) end
  if configured > 0 then return configured end
  return learned
end

-- The kind's level now and the ms from which it refills (`.at`, later than now after a take from a full bucket):
-- refilled continuously at `cap` per minute (MINUTE_MS, store/step_constants.py) since then, never above `cap`.
local function refill(bucket, kind, cap, now)
  local v = redis.call('HMGET', bucket, kind .. '.level', kind .. '.at')
  if not v[1] then return cap, now end
  local from = tonumber(v[2])
  local level = tonumber(v[1]) + math.max(now - from, 0) * cap / MINUTE_MS
  if level >= cap then return cap, now end
  return level, math.max(from, now)
end

-- `from`: the ms from which the level refills
local function set_level(bucket, kind, level, from)
  redis.call('HSET', bucket, kind .. '.level', string.format('%.3f', level), kind .. '.at', from)
end
