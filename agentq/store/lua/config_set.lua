-- Write one of the fleet's shared settings (store/config.py's `ConfigStore`, docs/config.md): its version bumped
-- in the same step, or, for a seed, only while the name is unset.
-- KEYS: the config hash
-- ARGV: name, the entry's JSON without its version, '1' to write only while unset ('0': write)
-- Returns the version written, 0 when the name was set already and only an unset one was to be written.
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and ARGV[3] == '1' then return 0 end
local version = 1
if current then version = (tonumber(string.match(current, '^{"version":(%d+),')) or 0) + 1 end
redis.call('HSET', KEYS[1], ARGV[1], '{"version":' .. version .. ',' .. string.sub(ARGV[2], 2))
return version
