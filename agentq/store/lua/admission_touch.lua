-- Count admitted calls as admitted now (the admission sweep published them again: the next sweep looks again a
-- heartbeat later), leaving alone the ones whose place was given back meanwhile (never written back).
-- KEYS: info (the admitted calls, hash: member -> an entry of `_admitted.lua`, admission.lua)
-- ARGV: now (ms), the members
-- Returns how many were touched
--#include _admitted
local values = redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
local touched = {}
for i, v in ipairs(values) do
  if v then
    local q, t, k = split_admitted(v)
    touched[#touched + 1] = ARGV[i + 1]
    touched[#touched + 1] = admitted_entry(q, t, k, ARGV[1])
  end
end
if #touched > 0 then redis.call('HSET', KEYS[1], unpack(touched)) end
return #touched / 2
