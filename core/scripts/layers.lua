-- Layers: one request checked against several Limits of one caller at once
-- (say 10 per second and 1000 per hour), admitted only if every layer
-- admits, and then taken from every layer; when any layer denies, none is
-- taken. Every algorithm's table is defined before this (algorithms[]), so
-- each algorithm's arithmetic exists once.
--
-- KEYS     each layer's keys (as many as its algorithm takes), in order;
--          all share the caller's hash tag
-- ARGV     mode (CONSUME, PEEK or REFUND), n; then for each layer: its
--          algorithm (Algorithm + 1), then its Limit as that algorithm's
--          file lists it
-- Reply    granted (n, or 0 when any layer denies), then for each layer the
--          five integers of the batch reply
local mode, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local layers, a, k = {}, 3, 1
while k <= #KEYS do
  local A = algorithms[tonumber(ARGV[a])]
  layers[#layers + 1] = {A = A, p = A.params(a + 1), k = k}
  a, k = a + 1 + A.nparams, k + A.nkeys
end

local vals = redis.call('MGET', unpack(KEYS))
local out, replies = {n}, {}
local first = mode
if mode == CONSUME then first = PEEK end
for i, l in ipairs(layers) do
  l.st = l.A.load(l.k, vals, l.p)
  replies[i] = {l.A.decide(l.st, l.p, n, first)}
  if mode ~= REFUND and replies[i][1] == 0 then out[1] = 0 end
end
-- Only if all admit, decide again for real. Nothing runs between the two
-- passes: the script is atomic.
if mode == CONSUME and out[1] > 0 then
  for i, l in ipairs(layers) do replies[i] = {l.A.decide(l.st, l.p, n, CONSUME)} end
end
for i, l in ipairs(layers) do
  -- A denial takes nothing, but as in the algorithms' own denials each
  -- layer's state lives as long as it matters under its Limit.
  l.A.save(l.st, l.p, replies[i][4], mode ~= PEEK)
  for j = 1, 5 do out[#out + 1] = replies[i][j] end
end
return out
