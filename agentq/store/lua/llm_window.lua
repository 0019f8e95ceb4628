-- Keep the context window a refusal of a model taught, for the fleet (`engine/windows.py`): only ever lowered.
-- KEYS: the learned windows hash (model -> tokens, agentq's estimate)
-- ARGV: the model, the window it taught (tokens)
-- Returns nothing
local kept = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not kept or tonumber(ARGV[2]) < kept then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
