-- Batch: decides requests on one or more states of one algorithm under one
-- Limit, in order, at one Redis instant, exactly as one call per request at
-- that instant would. One request on one state is the common case; the
-- client puts the requests of concurrent callers into one call when it can
-- (several of one key: a hot key; several keys in one slot).
-- The builder defines A, the algorithm's table, before this.
--
-- KEYS     the states, A.nkeys keys each
-- ARGV     the Limit (A.nparams values, as the algorithm's file lists them);
--          then for each state, in the order of KEYS: c, the number of its
--          requests, then c pairs: n (units, 1 <= n <= capacity), mode
--          (CONSUME, PEEK, ATMOST or REFUND; see the prelude)
-- Reply    for each request, in order, five integers: granted units (0:
--          denied; for PEEK the n that would pass, for REFUND 0), remaining
--          units after it, retry_after µs (0 unless denied), reset_after µs
--          (until the quota is whole), delay µs (LeakyBucket: how long an
--          admitted request waits before it proceeds)
local p = A.params(1)
local vals
if #KEYS == 1 then vals = {redis.call('GET', KEYS[1])} else vals = redis.call('MGET', unpack(KEYS)) end
local out, o = {}, 0
local a, k = A.nparams + 1, 1
while k <= #KEYS do
  local st = A.load(k, vals, p)
  local reset, nonpeek = 0, false
  for _ = 1, tonumber(ARGV[a]) do
    local n, mode = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local granted, remaining, retry, rs, delay = A.decide(st, p, n, mode)
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = granted, remaining, retry, rs, delay
    o, a, reset = o + 5, a + 2, rs
    if mode ~= PEEK then nonpeek = true end
  end
  A.save(st, p, reset, nonpeek)
  a, k = a + 1, k + A.nkeys
end
return out
