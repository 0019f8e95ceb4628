-- Admission of ready calls to their Celery queues (docs/tenants.md): calls admitted and not yet ended are held per queue
-- up to the queue's window; the others are parked per queue, tenant and priority, and each place an ended call
-- gives back goes to the next parked call: round-robin across tenants by weight (stride scheduling: a tenant's
-- pass grows by 1/weight per call admitted, the lowest pass goes first), by priority (1 first) inside a tenant,
-- never over a tenant's max_running_calls nor a concurrency key's limit.
-- Every key shares the hash tag `{admission}`: the parked lists and the queues' rings are named from KEYS[1]'s
-- prefix (same slot).
-- The step's commands grow with the queues, tenants, keys and lists it touches, not with its calls: each hash is
-- read once (HMGET) and written once (HSET/HDEL of many fields) at the end, the counters and rings are kept in
-- locals meanwhile, a list's parked calls are pushed with one RPUSH, read ahead with one LRANGE and taken with one
-- LTRIM at the end (the rare take from behind a head whose key is full flushes that list and uses LREM).
-- KEYS: info (the admitted calls, hash: member -> "queue\ttenant\tadmitted at (ms)\tkey", `_admitted.lua`; an
--       entry without the time, written by an earlier version, is given back alike), counts (hash: "q:<queue>",
--       "t:<tenant>", "k:<key>" -> admitted, "w:" -> parked entries withdrawn and not dropped yet; a field back at 0
--       is deleted), parked (hash: member -> 1 while parked; an ended member still parked, a canceled job's call,
--       is withdrawn: deleted here, its list entry skipped and dropped when read), queues (set: the queues with
--       parked calls), virtual time (hash: queue -> the pass of the last call admitted, as an earlier version
--       kept it: read only for a queue whose counts hold no "v:<queue>" field)
--       (counts also hold "v:<queue>": the queue's virtual time, the pass of the last call admitted, written with
--       the counters; never deleted; and "e:<queue>\t<tenant>": the digits of the priorities whose parked lists may
--       hold calls, absent: not known)
--       KEYS[6], on a single Redis only (never a cluster: another slot): a new job's hash, when the step is
--       pipelined after the job's script (`create_job`); the step runs only if the job was written (else: nil)
-- Other keys (prefix ARGV[1]): `<prefix>:ring:<queue>` (zset: tenant -> pass, the tenants with parked calls),
--       `<prefix>:p:<queue>\t<tenant>\t<priority>` (list of parked calls: '["member","key","limit"]\n' .. payload)
-- ARGV: prefix, now (ms), config JSON {"w": {queue: window}, "d": the window of another queue, "b": the free
--       places a queue's parked calls wait for (so they are published a few at a time), "wt": {tenant: weight},
--       "mx": {tenant: max running calls}},
--       n ended members, the n members, f queues to fill, the f queues, then per new call 7 values: member, queue,
--       tenant, priority (1-3), key ('' none), key limit, payload
--       A payload '!<list>\n<channel>\n<event>\n<message>' is the call's task, made for a broker on this Redis
--       (`runtime/pushed.py`): when the call is admitted (at once or later) the step pushes the message onto that
--       list itself (LPUSH, as kombu's Redis transport publishes), in admission order, publishes its task-sent
--       event on the channel (none: events off), with those of the other calls the step admits on that channel in
--       one message (`publish_events`), and answers '!'
-- Returns what to publish: '#<i>' for the i-th new call (1-based) admitted at once, else a parked call's payload,
-- and '!' for a call whose task the step pushed (nil when KEYS[6] names a job that does not exist: nothing done)
--#include _admitted
local admitted, counts, parked, queues, vtime = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if KEYS[6] and redis.call('EXISTS', KEYS[6]) == 0 then return false end  -- the job was not written
local prefix, now = ARGV[1], ARGV[2]
local config = cjson.decode(ARGV[3])
local windows, weights, maxima = config.w or {}, config.wt or {}, config.mx or {}
local default_window = tonumber(config.d or 1)
local batch = tonumber(config.b or 1)  -- parked calls are admitted once this many places are free (or the window's)
local CHUNK = 1000  -- the most values unpacked into one command
-- LOOKED_AT (store/step_constants.py): the parked calls of one priority looked at for a key with room
local out, touched, touched_order = {}, {}, {}

local function ring(q) return prefix .. ':ring:' .. q end
local listed = {}  -- each parked list named in this step: key -> {queue, tenant, priority}
local function list(q, t, p)
  local key = prefix .. ':p:' .. q .. '\t' .. t .. '\t' .. p
  if not listed[key] then listed[key] = {q, t, p} end
  return key
end
local function window_of(q) return tonumber(windows[q] or default_window) end
local function touch(q) if not touched[q] then touched[q] = true; touched_order[#touched_order + 1] = q end end
-- a number as it reads back from a zset or hash it was written to (Lua writes 14 significant digits)
local function stored(x) return tonumber(string.format('%.14g', x)) end

-- `cmd key values...` in chunks; the replies appended
local function chunked(cmd, key, values, step)
  local replies = {}
  for i = 1, #values, step do
    local reply = redis.call(cmd, key, unpack(values, i, math.min(i + step - 1, #values)))
    if type(reply) == 'table' then for _, v in ipairs(reply) do replies[#replies + 1] = v end end
  end
  return replies
end

-- the counters: read once, kept here, written once at the end (`read`: each field as read, false when absent)
local counted, changed, read = {}, {}, {}
local function read_counts(fields)
  local want, seen = {}, {}
  for _, f in ipairs(fields) do
    if counted[f] == nil and not seen[f] then seen[f] = true; want[#want + 1] = f end
  end
  local got = chunked('HMGET', counts, want, CHUNK)
  for i, f in ipairs(want) do counted[f] = tonumber(got[i] or '0') or 0; read[f] = got[i] end
end

-- the priorities whose parked lists of a queue and tenant may hold calls ("e:<queue>\t<tenant>" of the counts: their
-- digits; absent: not known, each list is read), read with the counts: a list none may hold is not read. A step told
-- to fill a queue (the sweep, `filled`) reads each list of it and writes what it found, so calls an earlier version
-- parked without saying so are found within a sweep.
local filled = {}
local function hint_field(q, t) return 'e:' .. q .. '\t' .. t end
local function may_hold(q, t, p)
  if filled[q] then return true end
  local h = read[hint_field(q, t)]
  if not h then return true end
  return string.find(h, tostring(p), 1, true) ~= nil
end
local function count(f)
  if counted[f] == nil then counted[f] = tonumber(redis.call('HGET', counts, f) or '0') end
  return counted[f]
end
local function add(f, by) counted[f] = count(f) + by; changed[f] = true end

-- the rings, read once per queue (tenant -> pass), written once at the end
local rings, ring_order = {}, {}
local function ring_of(q)
  local r = rings[q]
  if r == nil then
    local z = redis.call('ZRANGE', ring(q), 0, -1, 'WITHSCORES')
    r = {pass = {}, size = 0, was = #z > 0, changed = {}}
    for i = 1, #z, 2 do r.pass[z[i]] = tonumber(z[i + 1]); r.size = r.size + 1 end
    rings[q] = r
    ring_order[#ring_order + 1] = q
  end
  return r
end
local function set_pass(r, t, pass)
  if r.pass[t] == nil then r.size = r.size + 1 end
  if pass == nil then r.size = r.size - 1 end
  r.pass[t] = pass
  r.changed[t] = true
end

-- the queues' virtual times ("v:<queue>" of the counts, read with them for the new calls' queues; else as an
-- earlier version kept them), read once per queue (only when a tenant joins a ring), written once at the end with
-- the counters
local times, times_changed = {}, {}
local function vtime_of(q)
  if times[q] == nil then
    local v = read['v:' .. q]
    if v == nil then v = redis.call('HGET', counts, 'v:' .. q) end
    times[q] = tonumber(v or redis.call('HGET', vtime, q) or '0')
  end
  return times[q]
end

-- admitted members: value (false: not admitted), the ones that ended, the ones admitted now
local holding, gone, written = {}, {}, {}
local function admit(member, q, t, k)
  local v = admitted_entry(q, t, k, now)
  holding[member] = v
  written[#written + 1] = member
  written[#written + 1] = v
  add('q:' .. q, 1)
  add('t:' .. t, 1)
  if k ~= '' then add('k:' .. k, 1) end
end

local function room(q, t, k, l)
  if count('q:' .. q) >= window_of(q) then return false end
  local mx = maxima[t]
  if mx and count('t:' .. t) >= tonumber(mx) then return false end
  if k ~= '' and count('k:' .. k) >= tonumber(l) then return false end
  return true
end

-- parking: parked members ('stored': parked before this step, true: parked now, false: taken or withdrawn; nil: as
-- stored), the values pushed per list
local parking, pushes, push_order = nil, {}, {}
local joined = {}  -- queue and tenant (their hint's field) -> true: the tenant joined the ring, its lists were empty
local function park(member, q, t, p, k, l, payload)
  if parking[member] then return end  -- parked already (sent again by a recovery)
  parking[member] = true
  local r = ring_of(q)
  if r.pass[t] == nil then set_pass(r, t, vtime_of(q)); joined['e:' .. q .. '\t' .. t] = true end
  local key = list(q, t, p)
  if not pushes[key] then pushes[key] = {}; push_order[#push_order + 1] = key end
  table.insert(pushes[key], cjson.encode({member, k, l}) .. '\n' .. payload)
end

-- a parked entry: its head, and where its payload starts (`at`: the payload is not copied out of the entry, read
-- where it is by `deliver`)
local function parse(entry)
  local cut = string.find(entry, '\n', 1, true)
  local head = cjson.decode(string.sub(entry, 1, cut - 1))
  return {raw = entry, member = head[1], k = head[2], l = tonumber(head[3]), at = cut + 1}
end

-- whether parked entries are withdrawn: taken or withdrawn in this step, else (only while the store counts some
-- withdrawn entries not dropped yet, 'w:') no longer in the parked hash
local function mark_withdrawn(entries)
  local unsure, asked = {}, {}
  for _, e in ipairs(entries) do
    local state = parking and parking[e.member]
    if state == false then e.dead = true
    elseif state == nil and count('w:') > 0 then unsure[#unsure + 1] = e; asked[#asked + 1] = e.member end
  end
  if #asked == 0 then return end
  local got = chunked('HMGET', parked, asked, CHUNK)
  for i, e in ipairs(unsure) do if not got[i] then e.dead = true end end
end

-- the parked lists as read: items (from the list's head, parsed), next (the first not taken), all (the whole list
-- read), step (what a later read adds beyond what it wants; nil before the first read, which takes `ahead`, the
-- places to fill and one more, so whether the list still holds a call once they are filled needs no read of its
-- own; a later read mostly asks whether one more is left, so it adds 1, then 2, 4 ... for runs of withdrawn
-- entries)
local lists, list_order, ahead = {}, {}, 1
local function read_list(key, want)
  local s = lists[key]
  if s == nil then
    s = {items = {}, next = 1, all = false}
    lists[key] = s
    list_order[#list_order + 1] = key
  end
  local have = #s.items - s.next + 1
  if have < want and not s.all then
    local n = math.max(want - have, s.step or ahead)
    s.step = s.step and math.min(2 * s.step, CHUNK) or 1
    local more = redis.call('LRANGE', key, #s.items, #s.items + n - 1)
    local parsed = {}
    for _, e in ipairs(more) do parsed[#parsed + 1] = parse(e); s.items[#s.items + 1] = parsed[#parsed] end
    mark_withdrawn(parsed)
    s.all = #more < n
  end
  return s
end

-- the task-sent events of the calls pushed, published per channel as one message of EVENTS_GROUP events at most
-- (store/step_constants.py), in admission order: an event made joinable (`runtime/pushed.py`) is a message whose
-- body is the base64 of '[  ' .. its event .. '  ]', each part a multiple of three bytes, so the events of several
-- join as their base64 put one after the other with ',  ' ('LCAg') between; any other is published alone. Each is
-- noted as {channel, its base64 part, the payload holding it, where its message's rest starts and ends} when
-- joinable, else {channel, false, the event}: only what is published is copied out of its payload.
local JOINABLE, HEAD, COMMA, TAIL = '{"body": "WyAg', 'WyAg', 'LCAg', 'ICBd'
local events = {}
local function note_event(channel, s, i, j)
  local close = string.sub(s, i, i + #JOINABLE - 1) == JOINABLE and string.find(s, '"', i + #JOINABLE, true)
  if close and close <= j and string.sub(s, close - 4, close - 1) == TAIL then
    events[#events + 1] = {channel, string.sub(s, i + #JOINABLE, close - 5), s, close, j}
  else
    events[#events + 1] = {channel, false, string.sub(s, i, j)}
  end
end

local function publish_events()
  local groups, order = {}, {}
  local function flush(channel)
    local g = groups[channel]
    if g and #g.parts > 0 then
      redis.call('PUBLISH', channel, '{"body": "' .. HEAD .. table.concat(g.parts, COMMA) .. TAIL .. g.rest)
      g.parts = {}
    end
  end
  for _, e in ipairs(events) do
    local channel = e[1]
    if e[2] then
      local g = groups[channel]
      if not g then g = {parts = {}}; groups[channel] = g; order[#order + 1] = channel end
      if #g.parts == 0 then g.rest = string.sub(e[3], e[4], e[5]) end
      g.parts[#g.parts + 1] = e[2]
      if #g.parts >= EVENTS_GROUP then flush(channel) end
    else
      redis.call('PUBLISH', channel, e[3])
    end
  end
  for _, channel in ipairs(order) do flush(channel) end
end

-- what to answer for an admitted call's payload, the part of `s` from `from` on: a task made for the broker is pushed
-- (with the others, at the end)
local deliveries, delivery_order = {}, {}
local function deliver(s, from)
  if string.byte(s, from) ~= 33 then return from == 1 and s or string.sub(s, from) end  -- not '!'
  local a = string.find(s, '\n', from + 1, true)
  local b = string.find(s, '\n', a + 1, true)
  local c = string.find(s, '\n', b + 1, true)
  local key = string.sub(s, from + 1, a - 1)
  if not deliveries[key] then deliveries[key] = {}; delivery_order[#delivery_order + 1] = key end
  table.insert(deliveries[key], string.sub(s, c + 1))
  if b > a + 1 then note_event(string.sub(s, a + 1, b - 1), s, b + 1, c - 1) end
  return '!'
end

-- what to answer for the i-th new call admitted at once
local function at_once(payload, i)
  if string.byte(payload, 1) == 33 then return deliver(payload, 1) end
  return '#' .. i
end

local function free(k, l) return k == '' or count('k:' .. k) < l end

-- a list's first parked entry not withdrawn (nil: none); the withdrawn ones before it are dropped (trimmed with
-- the entries taken)
local function live_head(key)
  local s = read_list(key, 1)
  while s.items[s.next] and s.items[s.next].dead do
    s.next = s.next + 1
    if count('w:') > 0 then add('w:', -1) end  -- never below 0 (it would stop the checks for good)
    s = read_list(key, 1)
  end
  return s, s.items[s.next]
end

-- one of the few parked calls behind a head whose key is full (the rare path): the list's taken calls are
-- trimmed first, the call removed with LREM, and the list read again when next needed
local function take_behind(key)
  local s = read_list(key, LOOKED_AT)
  for j = s.next + 1, math.min(s.next + LOOKED_AT - 1, #s.items) do
    local e = s.items[j]
    if not e.dead and free(e.k, e.l) then
      if s.next > 1 then redis.call('LTRIM', key, s.next - 1, -1) end
      redis.call('LREM', key, 1, e.raw)
      lists[key] = {items = {}, next = 1, all = false}
      return e.member, e.k, e.raw, e.at
    end
  end
  return nil
end

-- the first parked call of tenant t in queue q whose key has room, taken out: the head of a priority's list, else
-- one of the next few behind a head whose key is full; the lists that may hold calls first, the others (read only
-- once those have none to give) after them
local function take(q, t)
  for _, hinted in ipairs({true, false}) do
    for p = 1, 3 do
      if may_hold(q, t, p) == hinted then
        local key = list(q, t, p)
        local s, head = live_head(key)
        if head then
          if free(head.k, head.l) then
            s.next = s.next + 1
            return head.member, head.k, head.raw, head.at
          end
          local member, k, entry, at = take_behind(key)
          if member then return member, k, entry, at end
        end
      end
    end
  end
  return nil
end

-- whether a tenant's parked lists in a queue are empty: those that may hold calls are looked at first, the others
-- only once those are empty (a tenant leaves the ring only when every list of it was read empty)
local function empty(q, t)
  for _, hinted in ipairs({true, false}) do
    for p = 1, 3 do
      if may_hold(q, t, p) == hinted then
        local _, head = live_head(list(q, t, p))
        if head then return false end
      end
    end
  end
  return true
end

-- the tenants of a ring, lowest pass first (ties: by name, as a zset orders them)
local function in_turn(r)
  local order = {}
  for t in pairs(r.pass) do order[#order + 1] = t end
  table.sort(order, function(x, y)
    if r.pass[x] ~= r.pass[y] then return r.pass[x] < r.pass[y] end
    return x < y
  end)
  return order
end

-- the next parked call of a ring admitted (false: none may be)
local function fill_one(q, r, blocked)
  for _, t in ipairs(in_turn(r)) do
    local pass = r.pass[t]
    local mx = maxima[t]
    if not blocked[t] and not (mx and count('t:' .. t) >= tonumber(mx)) then
      local member, k, entry, at = take(q, t)
      if member then
        parking = parking or {}
        parking[member] = false
        admit(member, q, t, k)
        table.insert(out, deliver(entry, at))
        times[q] = pass
        times_changed[q] = true
        if empty(q, t) then set_pass(r, t, nil)
        else set_pass(r, t, stored(pass + 1 / tonumber(weights[t] or 1))) end
        return true
      end
      if empty(q, t) then set_pass(r, t, nil) end  -- only withdrawn calls were left
    end
    blocked[t] = true
  end
  return false
end

-- give the queue's free places to its parked calls
local function fill(q)
  local window = window_of(q)
  local places = window - count('q:' .. q)
  if places < math.min(batch, window) then return end
  local r = ring_of(q)
  local tenants = {}
  for t in pairs(r.pass) do tenants[#tenants + 1] = 't:' .. t; tenants[#tenants + 1] = hint_field(q, t) end
  read_counts(tenants)
  ahead = math.min(math.max(places, 1) + 1, CHUNK)  -- one more: whether the list is left empty needs no read
  local blocked = {}
  while r.size > 0 and count('q:' .. q) < window do
    if not fill_one(q, r, blocked) then return end
  end
end

-- the parked members among the new calls from the i-th on (read when the first is parked)
local parking_read = false
local function read_parking(i)
  parking, parking_read = parking or {}, true
  local members = {}
  for j = i, #ARGV, 7 do members[#members + 1] = ARGV[j] end
  local got = chunked('HMGET', parked, members, CHUNK)
  for j, m in ipairs(members) do if got[j] and parking[m] == nil then parking[m] = 'stored' end end
end

-- 1. what the ended members and the new calls hold, and the counters they touch: read at once
local n = tonumber(ARGV[4])
local f = tonumber(ARGV[5 + n])
local first = 6 + n + f
local members, fields = {}, {}
for i = 5, 4 + n do members[#members + 1] = ARGV[i] end
for i = first, #ARGV, 7 do members[#members + 1] = ARGV[i] end
local values = chunked('HMGET', admitted, members, CHUNK)
for i, m in ipairs(members) do
  if holding[m] == nil then holding[m] = values[i] end
end
local ended, unheld = {}, {}
for i = 5, 4 + n do
  local v = holding[ARGV[i]]
  if not v then
    unheld[#unheld + 1] = ARGV[i]
  else
    holding[ARGV[i]] = false
    local q, t, k = split_admitted(v)
    ended[#ended + 1] = {q, t, k}
    gone[#gone + 1] = ARGV[i]
    fields[#fields + 1] = 'q:' .. q
    fields[#fields + 1] = 't:' .. t
    fields[#fields + 1] = hint_field(q, t)
    if k ~= '' then fields[#fields + 1] = 'k:' .. k end
  end
end
for i = first, #ARGV, 7 do
  fields[#fields + 1] = 'q:' .. ARGV[i + 1]
  fields[#fields + 1] = 'v:' .. ARGV[i + 1]  -- the queue's virtual time, for a tenant its calls may park
  fields[#fields + 1] = 't:' .. ARGV[i + 2]
  fields[#fields + 1] = hint_field(ARGV[i + 1], ARGV[i + 2])
  if ARGV[i + 4] ~= '' then fields[#fields + 1] = 'k:' .. ARGV[i + 4] end
end
fields[#fields + 1] = 'w:'
read_counts(fields)

-- an ended call still parked (its job canceled) is withdrawn: it leaves the parked hash at once, and its entry is
-- dropped when its list is next read ('w:' counts the entries withdrawn and not dropped yet)
if #unheld > 0 then
  local got = chunked('HMGET', parked, unheld, CHUNK)
  for i, m in ipairs(unheld) do
    parking = parking or {}
    if got[i] and parking[m] == nil then parking[m] = false; add('w:', 1) end
  end
end

-- 2. the calls that ended give their places back
for _, e in ipairs(ended) do
  add('q:' .. e[1], -1)
  add('t:' .. e[2], -1)
  if e[3] ~= '' then add('k:' .. e[3], -1) end
  touch(e[1])
end
for i = 6 + n, 5 + n + f do touch(ARGV[i]); filled[ARGV[i]] = true end

-- 3. the new calls: admitted at once when their queue has nothing parked and room, else parked
local index = 0
for i = first, #ARGV, 7 do
  index = index + 1
  local member, q, t, p, k, l = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  if holding[member] then
    table.insert(out, at_once(ARGV[i + 6], index))  -- admitted already (sent again by a recovery): sent again
  elseif ring_of(q).size == 0 and room(q, t, k, l) then
    admit(member, q, t, k)
    table.insert(out, at_once(ARGV[i + 6], index))
  else
    if not parking_read then read_parking(i) end
    park(member, q, t, p, k, l, ARGV[i + 6])
    touch(q)
  end
end
for _, key in ipairs(push_order) do chunked('RPUSH', key, pushes[key], CHUNK) end

-- 4. the free places of the queues touched go to their parked calls
for _, q in ipairs(touched_order) do fill(q) end

-- 5. everything changed, written once; the tasks made for the broker pushed
for _, key in ipairs(delivery_order) do chunked('LPUSH', key, deliveries[key], CHUNK) end
publish_events()
if #gone > 0 then chunked('HDEL', admitted, gone, CHUNK) end
if #written > 0 then chunked('HSET', admitted, written, 2 * CHUNK) end
local set, unset = {}, {}
for field in pairs(changed) do
  if counted[field] == 0 then unset[#unset + 1] = field
  else set[#set + 1] = field; set[#set + 1] = counted[field] end
end
if #unset > 0 then chunked('HDEL', counts, unset, CHUNK) end
for q in pairs(times_changed) do set[#set + 1] = 'v:' .. q; set[#set + 1] = times[q] end
-- the priorities whose lists may still hold calls, for each queue and tenant whose lists this step read or pushed to:
-- written when a list the record leaves out now holds calls, else only along with the counters (nothing written
-- for it alone: a record that says more than it must costs a read, never a call)
local counting, pairs_seen = #set > 0, {}
for _, keys in ipairs({list_order, push_order}) do
  for _, key in ipairs(keys) do
    local m = listed[key]
    local field = hint_field(m[1], m[2])
    if not pairs_seen[field] then
      pairs_seen[field] = true
      local digits = ''
      for p = 1, 3 do
        local each = list(m[1], m[2], p)
        local s = lists[each]
        local holds
        if pushes[each] then holds = true
        elseif s then holds = not (s.all and s.next > #s.items)  -- read to its end and all taken: left empty
        else holds = not joined[field] and may_hold(m[1], m[2], p) end
        if holds then digits = digits .. p end
      end
      local was = read[field] or '123'
      local grew = false
      for p = 1, 3 do
        if string.find(digits, tostring(p), 1, true) and not string.find(was, tostring(p), 1, true) then grew = true end
      end
      if digits ~= was and (grew or counting) then set[#set + 1] = field; set[#set + 1] = digits end
    end
  end
end
if #set > 0 then chunked('HSET', counts, set, 2 * CHUNK) end
if parking then
  set, unset = {}, {}
  for member, state in pairs(parking) do
    if state == true then set[#set + 1] = member; set[#set + 1] = 1
    elseif state == false then unset[#unset + 1] = member end
  end
  if #unset > 0 then chunked('HDEL', parked, unset, CHUNK) end
  if #set > 0 then chunked('HSET', parked, set, 2 * CHUNK) end
end
for _, key in ipairs(list_order) do
  local s = lists[key]
  if s.next > 1 then redis.call('LTRIM', key, s.next - 1, -1) end
end
local opened, closed = {}, {}
for _, q in ipairs(ring_order) do
  local r = rings[q]
  if r.size == 0 then
    if r.was then redis.call('DEL', ring(q)) end
    if r.was or filled[q] then closed[#closed + 1] = q end
  else
    local add_pass, remove = {}, {}
    for t in pairs(r.changed) do
      if r.pass[t] then add_pass[#add_pass + 1] = r.pass[t]; add_pass[#add_pass + 1] = t
      else remove[#remove + 1] = t end
    end
    if #remove > 0 then chunked('ZREM', ring(q), remove, CHUNK) end
    if #add_pass > 0 then chunked('ZADD', ring(q), add_pass, 2 * CHUNK) end
    if not r.was then opened[#opened + 1] = q end
  end
end
if #opened > 0 then redis.call('SADD', queues, unpack(opened)) end
if #closed > 0 then redis.call('SREM', queues, unpack(closed)) end
return out
