-- Layers: one request checked against several limits of one caller at
-- once (e.g. 10 per second and 1000 per hour), admitted only if every layer
-- admits, consuming from none when any denies. The algorithms' own scripts
-- are prepended as functions (algs[1..5], by Algorithm + 1) when this script
-- is built, so each algorithm's arithmetic exists once.
--
-- KEYS     one key per layer; all share the caller's hash tag
-- ARGV     for each layer: algorithm (0-based), argc, the position of the
--          peek flag among its arguments, then its argc arguments exactly
--          as that algorithm's script takes them (peek flag "1")
-- Reply    {all allowed 0|1, then per layer the algorithm's 5 integers}
local layers = {}
local i = 1
for l = 1, #KEYS do
  local alg = tonumber(ARGV[i]) + 1
  local argc = tonumber(ARGV[i + 1])
  local peekpos = tonumber(ARGV[i + 2])
  local args = {}
  for j = 1, argc do args[j] = ARGV[i + 2 + j] end
  layers[l] = {alg = alg, args = args, peekpos = peekpos}
  i = i + 3 + argc
end

-- Decide every layer without writing; only if all admit, decide again for
-- real. Nothing runs between the two passes: the script is atomic.
local out = {1}
local replies = {}
for l, layer in ipairs(layers) do
  replies[l] = algs[layer.alg]({KEYS[l]}, layer.args)
  if replies[l][1] == 0 then out[1] = 0 end
end
if out[1] == 1 then
  for l, layer in ipairs(layers) do
    layer.args[layer.peekpos] = '0'
    replies[l] = algs[layer.alg]({KEYS[l]}, layer.args)
  end
else
  -- Nothing is consumed, but as in the algorithms' own denials, each
  -- layer's state lives as long as it matters under its Limit, which may
  -- have changed since its TTL was set.
  for l = 1, #layers do
    local ttl = math.ceil(replies[l][4] / 1000)
    if ttl > 0 and redis.call('PTTL', KEYS[l]) < ttl - 1 then redis.call('PEXPIRE', KEYS[l], ttl) end
  end
end
for l = 1, #layers do
  for j = 1, 5 do out[#out + 1] = replies[l][j] end
end
return out
