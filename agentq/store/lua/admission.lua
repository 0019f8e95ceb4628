-- Admission of ready calls to their Celery queues (SPEC §17): calls admitted and not yet ended are held per queue
-- up to the queue's window; the others are parked per queue, tenant and priority, and each place an ended call
-- gives back goes to the next parked call: round-robin across tenants by weight (stride scheduling: a tenant's
-- pass grows by 1/weight per call admitted, the lowest pass goes first), by priority (1 first) inside a tenant,
-- never over a tenant's max_running_calls nor a concurrency key's limit.
-- Every key shares the hash tag `{admission}`: the parked lists and the queues' rings are named from KEYS[1]'s
-- prefix (same slot).
-- KEYS: held (zset: member -> admitted at, ms), info (hash: member -> "queue\ttenant\tkey"), counts (hash:
--       "q:<queue>", "t:<tenant>", "k:<key>" -> admitted), parked (hash: member -> 1 while parked), queues (set: the
--       queues with parked calls), virtual time (hash: queue -> the pass of the last call admitted)
-- ARGV: prefix, now (ms), config JSON {"w": {queue: window}, "d": the window of another queue, "b": the free
--       places a queue's parked calls wait for (so they are published a few at a time), "wt": {tenant: weight},
--       "mx": {tenant: max running calls}},
--       n ended members, the n members, f queues to fill, the f queues, then per new call 7 values: member, queue,
--       tenant, priority (1-3), key ('' none), key limit, payload
-- Returns what to publish: '#<i>' for the i-th new call (1-based) admitted at once, else a parked call's payload
local held, info, counts, parked, queues, vtime = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, now = ARGV[1], tonumber(ARGV[2])
local config = cjson.decode(ARGV[3])
local windows, weights, maxima = config.w or {}, config.wt or {}, config.mx or {}
local default_window = tonumber(config.d or 1)
local batch = tonumber(config.b or 1)  -- parked calls are admitted once this many places are free (or the window's)
local out, touched = {}, {}

local function count(field) return tonumber(redis.call('HGET', counts, field) or '0') end
local function ring(q) return prefix .. ':ring:' .. q end
local function list(q, t, p) return prefix .. ':p:' .. q .. '\t' .. t .. '\t' .. p end

-- whether a call of tenant t with key k (limit l) may be admitted in queue q now
local function room(q, t, k, l)
  if count('q:' .. q) >= tonumber(windows[q] or default_window) then return false end
  local mx = maxima[t]
  if mx and count('t:' .. t) >= tonumber(mx) then return false end
  if k ~= '' and count('k:' .. k) >= tonumber(l) then return false end
  return true
end

local function admit(member, q, t, k)
  redis.call('ZADD', held, now, member)
  redis.call('HSET', info, member, q .. '\t' .. t .. '\t' .. k)
  redis.call('HINCRBY', counts, 'q:' .. q, 1)
  redis.call('HINCRBY', counts, 't:' .. t, 1)
  if k ~= '' then redis.call('HINCRBY', counts, 'k:' .. k, 1) end
end

local function park(member, q, t, p, k, l, payload)
  if redis.call('HSETNX', parked, member, 1) == 0 then return end  -- parked already (sent again by a recovery)
  local r = ring(q)
  if not redis.call('ZSCORE', r, t) then
    redis.call('ZADD', r, tonumber(redis.call('HGET', vtime, q) or '0'), t)
    redis.call('SADD', queues, q)
  end
  redis.call('RPUSH', list(q, t, p), cjson.encode({member, k, l}) .. '\n' .. payload)
end

local function parse(entry)
  local cut = string.find(entry, '\n', 1, true)
  local head = cjson.decode(string.sub(entry, 1, cut - 1))
  return head[1], head[2], tonumber(head[3]), string.sub(entry, cut + 1)
end

local function free(k, l) return k == '' or count('k:' .. k) < l end

-- the first parked call of tenant t in queue q whose key has room, taken out: the head of a priority's list (one
-- LPOP), else one of the next few behind a head whose key is full
local function take(q, t)
  for p = 1, 3 do
    local key = list(q, t, p)
    local head = redis.call('LINDEX', key, 0)
    if head then
      local member, k, l, payload = parse(head)
      if free(k, l) then
        redis.call('LPOP', key)
        return member, k, payload
      end
      for _, entry in ipairs(redis.call('LRANGE', key, 1, 31)) do
        member, k, l, payload = parse(entry)
        if free(k, l) then
          redis.call('LREM', key, 1, entry)
          return member, k, payload
        end
      end
    end
  end
  return nil
end

local function empty(q, t)
  return redis.call('EXISTS', list(q, t, 1), list(q, t, 2), list(q, t, 3)) == 0
end

-- give the queue's free places to its parked calls
local function fill(q)
  local r = ring(q)
  local window = tonumber(windows[q] or default_window)
  local blocked = {}
  if window - count('q:' .. q) < math.min(batch, window) then return end
  while count('q:' .. q) < window do
    local tenants = redis.call('ZRANGE', r, 0, -1, 'WITHSCORES')
    if #tenants == 0 then redis.call('SREM', queues, q) return end
    local admitted = false
    for i = 1, #tenants, 2 do
      local t, pass = tenants[i], tonumber(tenants[i + 1])
      local mx = maxima[t]
      if not blocked[t] and not (mx and count('t:' .. t) >= tonumber(mx)) then
        local member, k, payload = take(q, t)
        if member then
          redis.call('HDEL', parked, member)
          admit(member, q, t, k)
          table.insert(out, payload)
          redis.call('HSET', vtime, q, pass)
          if empty(q, t) then redis.call('ZREM', r, t)
          else redis.call('ZADD', r, pass + 1 / tonumber(weights[t] or 1), t) end
          admitted = true
          break
        end
      end
      blocked[t] = true
    end
    if not admitted then return end
  end
end

-- the calls that ended give their places back
local n = tonumber(ARGV[4])
for i = 5, 4 + n do
  local member = ARGV[i]
  if redis.call('ZREM', held, member) == 1 then
    local v = redis.call('HGET', info, member) or ''
    redis.call('HDEL', info, member)
    local a = string.find(v, '\t', 1, true)
    local b = string.find(v, '\t', a + 1, true)
    local q, t, k = string.sub(v, 1, a - 1), string.sub(v, a + 1, b - 1), string.sub(v, b + 1)
    redis.call('HINCRBY', counts, 'q:' .. q, -1)
    redis.call('HINCRBY', counts, 't:' .. t, -1)
    if k ~= '' then redis.call('HINCRBY', counts, 'k:' .. k, -1) end
    touched[q] = true
  end
end
local f = tonumber(ARGV[5 + n])
for i = 6 + n, 5 + n + f do touched[ARGV[i]] = true end

-- the new calls: admitted at once when their queue has nothing parked and room, else parked
local first, index = 6 + n + f, 0
for i = first, #ARGV, 7 do
  index = index + 1
  local member, q, t, p, k, l = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  if redis.call('ZSCORE', held, member) then
    table.insert(out, '#' .. index)  -- admitted already (sent again by a recovery): sent again
  elseif redis.call('EXISTS', ring(q)) == 0 and room(q, t, k, l) then
    admit(member, q, t, k)
    table.insert(out, '#' .. index)
  else
    park(member, q, t, p, k, l, ARGV[i + 6])
    touched[q] = true
  end
end
for q in pairs(touched) do fill(q) end
return out
