-- Write a whole, already validated job in one step, or nothing when the id is taken.
-- KEYS: job, log, calls, status, waiting, attempts, tools, events, dependents, exchanges, approval, lost, spec
--       (JobKeys.all)
-- ARGV[1]: JSON {job: {field: str} (hot), spec: {field: str} (cold: keys.SPEC_FIELDS), log: [msg JSON],
--               calls: {id: record JSON}, status: {id: str}, waiting: {id: int} (calls waiting on others only),
--               tools: {name: schema JSON}, events: [envelope JSON], dependents: {id: JSON list of call ids},
--               approval: {id: 1}, exchanges: [exchange JSON] (a continued or forked job's copied ones)}
-- ARGV[2]: expiry of every key, unix milliseconds
-- KEYS[14..] (a single Redis only, none on a cluster: they are not in the job's slot): the fleet-wide sorted sets
--   listing the job once it is written (the listings, the active jobs, the approvals), ZADD NX; ARGV[3]: the job id,
--   ARGV[4..]: the score in each, in the order of their keys. A refused id leaves them as they were.
-- Each hash and the log are written with as few commands as their size allows (a command takes up to 1000 fields
-- or messages): a job of N calls costs a few commands, not one per field.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local p = cjson.decode(ARGV[1])
local expire_at = ARGV[2]
local CHUNK = 2000  -- arguments per command (Lua's unpack takes a few thousand at most)

local written = {}  -- the keys this step wrote: each gets the job's expiry (a key not written stays absent)

local function write(command, key, args)
  for first = 1, #args, CHUNK do
    redis.call(command, key, unpack(args, first, math.min(first + CHUNK - 1, #args)))
  end
  if #args > 0 then written[#written + 1] = key end
end

local function hset_all(key, map)
  local args = {}
  for field, value in pairs(map) do
    args[#args + 1] = field
    args[#args + 1] = tostring(value)
  end
  write('HSET', key, args)
end

p.job.expire_at_ms = expire_at
-- a job none of whose calls waits on another is marked so: its commits read no dependents (_committed.lua);
-- add_calls.lua removes the mark when it writes a call that waits
if next(p.dependents) == nil then p.job.no_dependents = '1' end
hset_all(KEYS[1], p.job)
write('RPUSH', KEYS[2], p.log)
if p.exchanges then write('RPUSH', KEYS[10], p.exchanges) end
hset_all(KEYS[3], p.calls)
hset_all(KEYS[4], p.status)
hset_all(KEYS[5], p.waiting)
hset_all(KEYS[7], p.tools)
hset_all(KEYS[9], p.dependents)
hset_all(KEYS[11], p.approval)
hset_all(KEYS[13], p.spec)
for _, envelope in ipairs(p.events) do redis.call('XADD', KEYS[8], '*', 'e', envelope) end
if #p.events > 0 then written[#written + 1] = KEYS[8] end
for _, key in ipairs(written) do redis.call('PEXPIREAT', key, expire_at) end
for i = 14, #KEYS do redis.call('ZADD', KEYS[i], 'NX', ARGV[i - 10], ARGV[3]) end
return 1
