-- An admitted call's entry in the admission's `info` hash, shared by admission.lua and admission_touch.lua
-- (`--#include _admitted`): "queue\ttenant\tadmitted at (ms)\tkey" ('' key: none). An entry written by an earlier
-- version, "queue\ttenant\tkey", has no time: its third field is then the key, '' or "<tool>:<value>" (never
-- digits alone); the key, last, may hold tabs of its own.

-- queue, tenant, key and admitted at (ms; nil: not known) of an entry
local function split_admitted(v)
  local a = string.find(v, '\t', 1, true)
  local b = string.find(v, '\t', a + 1, true)
  local q, t, rest = string.sub(v, 1, a - 1), string.sub(v, a + 1, b - 1), string.sub(v, b + 1)
  local c = string.find(rest, '\t', 1, true)
  if c and string.find(string.sub(rest, 1, c - 1), '^%d+$') then
    return q, t, string.sub(rest, c + 1), string.sub(rest, 1, c - 1)
  end
  return q, t, rest, nil
end

local function admitted_entry(q, t, k, at) return q .. '\t' .. t .. '\t' .. at .. '\t' .. k end
