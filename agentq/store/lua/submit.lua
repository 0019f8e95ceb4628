-- Write a whole, already validated job in one step, or nothing when the id is taken.
-- KEYS: job, log, calls, status, waiting, attempts, tools, events, dependents, exchanges, approval, lost, spec
--       (JobKeys.all)
-- ARGV[1]: JSON {job: {field: str} (hot), spec: {field: str} (cold: keys.SPEC_FIELDS), log: [msg JSON],
--               calls: {id: record JSON}, status: {id: str}, waiting: {id: int} (calls waiting on others only),
--               tools: {name: schema JSON}, events: [envelope JSON], dependents: {id: JSON list of call ids},
--               approval: {id: 1}}
-- ARGV[2]: expiry of every key, unix milliseconds
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local p = cjson.decode(ARGV[1])
local expire_at = ARGV[2]

local function hset_all(key, map)
  for field, value in pairs(map) do redis.call('HSET', key, field, tostring(value)) end
end

hset_all(KEYS[1], p.job)
redis.call('HSET', KEYS[1], 'expire_at_ms', expire_at)
for _, message in ipairs(p.log) do redis.call('RPUSH', KEYS[2], message) end
hset_all(KEYS[3], p.calls)
hset_all(KEYS[4], p.status)
hset_all(KEYS[5], p.waiting)
hset_all(KEYS[7], p.tools)
hset_all(KEYS[9], p.dependents)
hset_all(KEYS[11], p.approval)
hset_all(KEYS[13], p.spec)
for _, envelope in ipairs(p.events) do redis.call('XADD', KEYS[8], '*', 'e', envelope) end
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('PEXPIREAT', KEYS[i], expire_at) end
end
return 1
