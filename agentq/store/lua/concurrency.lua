-- Job concurrency keys (docs/tenants.md): at most `limit` jobs of a tenant holding a key run at once, first come first
-- served per key; a job starts only when it fits under all of its keys. Every key of a tenant shares its hash tag.
-- KEYS[1]: the tenant's jobs hash (job id -> JSON {k: [[key, limit], ...], x: expiry (s), p: place in line})
-- ARGV[1]: JSON (store/step_args.py ConcurrencyArgs) {prefix: that of the tenant's other keys: `h:<key>` holders
--          (zset: job id -> expiry, s), `w:<key>` waiters (zset: job id -> place), `seq` (the last place given);
--          op: 'admit' | 'release' | 'promote'; job_id ('' for promote); admit: keys: its [[key, limit], ...],
--          expire_at_s: its expiry (s); promote: keys: the keys to look at, [key, ...]}
-- Returns {state, started...}: state 1 when the job admitted holds its keys, 0 when it waits (or was released);
-- then the ids of waiting jobs that hold their keys now (a release's, or ones whose holders had expired)
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local a = cjson.decode(ARGV[1])
local jobs, prefix, op, job = KEYS[1], a.prefix, a.op, a.job_id
local function holders(key) return prefix .. 'h:' .. key end
local function waiters(key) return prefix .. 'w:' .. key end

local function spec_of(id)
  local raw = redis.call('HGET', jobs, id)
  if raw then return cjson.decode(raw) end
  return nil
end

local function last(key, at)  -- a key lives as long as the last job it names
  if redis.call('TTL', key) < at - now then redis.call('EXPIREAT', key, math.ceil(at)) end
end

local function fits(id, spec)  -- room under each of its keys, and first in line on each
  for _, kl in ipairs(spec.k) do
    local h = holders(kl[1])
    redis.call('ZREMRANGEBYSCORE', h, '-inf', now)  -- jobs that expired holding it
    if redis.call('ZSCORE', h, id) == false and redis.call('ZCARD', h) >= kl[2] then return false end
    local first = redis.call('ZRANGE', waiters(kl[1]), 0, 0)[1]
    if first and first ~= id then return false end
  end
  return true
end

local function hold(id, spec)
  for _, kl in ipairs(spec.k) do
    redis.call('ZADD', holders(kl[1]), spec.x, id)
    redis.call('ZREM', waiters(kl[1]), id)
    last(holders(kl[1]), spec.x)
  end
end

local function drop(id, spec)
  if spec then
    for _, kl in ipairs(spec.k) do
      redis.call('ZREM', holders(kl[1]), id)
      redis.call('ZREM', waiters(kl[1]), id)
    end
  end
  redis.call('HDEL', jobs, id)
end

local started = {}
local function promote(keys)  -- let the first in line of each key in, while they fit; their other keys next
  local i = 1
  while i <= #keys do
    local key = keys[i]
    i = i + 1
    while true do
      local head = redis.call('ZRANGE', waiters(key), 0, 0)[1]
      if not head then break end
      local spec = spec_of(head)
      if spec == nil or spec.x <= now then
        drop(head, spec)  -- expired while it waited
      elseif fits(head, spec) then
        hold(head, spec)
        started[#started + 1] = head
        for _, kl in ipairs(spec.k) do keys[#keys + 1] = kl[1] end
      else
        break
      end
    end
  end
end

if op == 'admit' then
  local spec = spec_of(job)
  if spec then  -- admitted before (a repeated step): as it stands
    return {redis.call('ZSCORE', holders(spec.k[1][1]), job) and 1 or 0}
  end
  spec = {k = a.keys, x = a.expire_at_s, p = redis.call('INCR', prefix .. 'seq')}
  redis.call('HSET', jobs, job, cjson.encode(spec))
  last(jobs, spec.x)
  last(prefix .. 'seq', spec.x)
  local keys = {}
  for _, kl in ipairs(spec.k) do keys[#keys + 1] = kl[1] end
  promote(keys)  -- the first in line whose holders expired go first
  if fits(job, spec) then
    hold(job, spec)
    return {1, unpack(started)}
  end
  for _, kl in ipairs(spec.k) do
    redis.call('ZADD', waiters(kl[1]), spec.p, job)
    last(waiters(kl[1]), spec.x)
  end
  return {0, unpack(started)}
end

if op == 'promote' then  -- a sweep: the first in line of these keys, while they fit (holders that expired drop out)
  promote(a.keys)
  return {0, unpack(started)}
end

-- release: the job ended (or waits no more): its place goes to the first in line
local spec = spec_of(job)
if spec == nil then return {0} end
drop(job, spec)
local keys = {}
for _, kl in ipairs(spec.k) do keys[#keys + 1] = kl[1] end
promote(keys)
return {0, unpack(started)}
