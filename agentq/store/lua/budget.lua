-- A job's budget (docs/rate-limits.md#budgets), shared by every process that makes its model requests (its ticks, its latent
-- calls, its module child jobs' requests): reserve before a request is sent, settle with what it spent after.
-- KEYS: the (root) job's job hash, its budget hash
-- The budget hash holds `spent.<n>` and `held.<n>` for n in requests, input, output, cost (nano-dollars),
-- `r:<key>` = "requests input output cost" held by the request `key` in flight, and `exceeded`: the message of
-- the first refusal (every later reservation is refused with it: nothing more is sent once the budget ran out).
--
-- ARGV: [1] a JSON object (`BudgetReserveArgs` in store/step_args.py): op 'reserve', key, the limits
--       max_requests, max_input_tokens, max_output_tokens, max_cost_nanousd (absent: none), then the ask:
--       input_tokens, input_nanousd (their cost), output_tokens (wanted: the request's max_tokens),
--       min_output_tokens (the fewest worth sending it for), output_nanousd_per_token (the cost of one, a float)
-- Returns {'granted', output tokens it may write (its max_tokens)} or {'refused', what ran out}; a reserve
-- replayed with its key answers as granted again.
--
-- ARGV: [1] a JSON object (`BudgetSettleArgs`): op 'settle', key, what the request spent: requests, input_tokens,
--       output_tokens, cost_nanousd
-- Returns 1, or 0 when that key held nothing (settled already).
local budget = KEYS[2]
local a = cjson.decode(ARGV[1])
local key = 'r:' .. a.key

local function num(field)
  return tonumber(redis.call('HGET', budget, field) or '0')
end

local function used(n)
  return num('spent.' .. n) + num('held.' .. n)
end

local function dollars(nanos)
  return string.format('$%.6f', nanos / 1e9)
end

local function add(field, amount)  -- amounts go to Redis as integer text, never in a float's exponent form
  redis.call('HINCRBY', budget, field, string.format('%d', amount))
end

local function refuse(message)
  redis.call('HSET', budget, 'exceeded', message)
  return {'refused', message}
end

if a.op == 'settle' then
  local spent = {a.requests, a.input_tokens, a.output_tokens, a.cost_nanousd}
  local held = redis.call('HGET', budget, key)
  if not held then return 0 end
  local names = {'requests', 'input', 'output', 'cost'}
  local i = 1
  for amount in string.gmatch(held, '%S+') do
    add('held.' .. names[i], -tonumber(amount))
    add('spent.' .. names[i], spent[i])
    i = i + 1
  end
  redis.call('HDEL', budget, key)
  return 1
end

local expire_at = redis.call('HGET', KEYS[1], 'expire_at_ms')
if not expire_at then return {'refused', 'the job is gone (expired), and its budget with it'} end
local granted = redis.call('HGET', budget, key)
if granted then return {'granted', string.match(granted, '^%S+ %S+ (%S+)')} end
local exceeded = redis.call('HGET', budget, 'exceeded')
if exceeded then return {'refused', exceeded} end

local max_requests, max_input = a.max_requests, a.max_input_tokens
local max_output, max_cost = a.max_output_tokens, a.max_cost_nanousd
local ask_input, ask_input_cost = a.input_tokens, a.input_nanousd
local ask_output, min_output, output_rate = a.output_tokens, a.min_output_tokens, a.output_nanousd_per_token

if max_requests and used('requests') + 1 > max_requests then
  return refuse(string.format('max_requests: %d of %d model requests made or in flight', used('requests'),
    max_requests))
end
if max_input and used('input') + ask_input > max_input then
  return refuse(string.format('max_input_tokens: %d of %d input tokens used or held; the next request needs about %d',
    used('input'), max_input, ask_input))
end
local output = ask_output
local limited_by = nil
if max_output and max_output - used('output') < output then
  output, limited_by = math.max(0, max_output - used('output')), 'output'
end
if max_cost then
  local room = max_cost - used('cost') - ask_input_cost
  if output_rate > 0 and math.floor(room / output_rate) < output then
    output, limited_by = math.max(0, math.floor(room / output_rate)), 'cost'
  end
  if room < 0 then output, limited_by = 0, 'cost' end
end
if output < min_output and limited_by == 'cost' then
  return refuse(string.format('max_cost_usd: %s of %s spent or held; the next request needs about %s',
    dollars(used('cost')), dollars(max_cost), dollars(ask_input_cost + min_output * output_rate)))
elseif output < min_output then
  return refuse(string.format('max_output_tokens: %d of %d output tokens used or held; the next request needs '
    .. 'at least %d', used('output'), max_output or 0, min_output))
end

local cost = ask_input_cost + math.ceil(output * output_rate)
add('held.requests', 1)
add('held.input', ask_input)
add('held.output', output)
add('held.cost', cost)
redis.call('HSET', budget, key, string.format('1 %d %d %d', ask_input, output, cost))
redis.call('PEXPIREAT', budget, expire_at)
return {'granted', tostring(output)}
