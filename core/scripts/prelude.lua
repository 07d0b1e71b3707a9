-- Prelude: the first part of the library (see scripts.go). It holds what
-- the algorithms share. Loaded as a Redis 7 function library, everything
-- here and in the algorithms' files is defined once, when the library is
-- loaded; run as a script (EVALSHA, where functions are not available), it
-- is defined on every call.
--
-- Every number the library computes is an integer below 2^53, so Lua's
-- doubles hold it exactly; the client refuses Limits whose sums could leave
-- that range. Numbers are written into values with string.format('%d'),
-- never with tostring, which keeps only 14 digits, and are passed to
-- redis.call the same way: cheaper than Redis' own conversion of a Lua
-- number, which a hot call would pay on every write. A multiple assignment
-- never mixes locals and table fields: miniredis' Lua (gopher-lua), which
-- the tests run on, assigns such a statement wrongly inside a function.
--
-- A library being loaded may not reach the standard libraries, so their
-- functions become locals on the first call (init).
local floor, ceil, min, max, fmt, match, gmatch, sub, call, pcall_, type_

local function init()
  floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
  fmt, match, gmatch, sub = string.format, string.match, string.gmatch, string.sub
  call, pcall_, type_ = redis.call, redis.pcall, type
end

-- What a request asks for (the low 3 bits of its code in ARGV).
local CONSUME = 0 -- take n units if n fit, else nothing
local PEEK = 1    -- report what CONSUME would decide; change nothing
local ATMOST = 2  -- take as many as fit, up to n (at least 1, or nothing)
local REFUND = 3  -- give back n units taken at the stamp's instant
local CHARGE = 4  -- take n more units even beyond what is left: a debt
local RENEW = 5   -- keep the permit named by the stamp (Concurrency)

-- clock is Redis TIME in µs, read once per call (see now), or 0 until an
-- algorithm that reads its own state (own: the fixed window) needs it, so that every
-- decision of one call is taken at the same Redis instant. Waits are
-- measured from it. Each state keeps its own time too, and never moves
-- back when Redis' clock does (a failover to a replica whose clock is
-- behind), so no fresh quota is handed out.
local clock, clock_ms

local function now()
  local t = call('TIME')
  clock = t[1] * 1000000 + t[2]
  clock_ms = floor(clock / 1000)
end

-- algorithms[Algorithm + 1] is an algorithm's table:
--   nkeys, nparams   how many KEYS one state takes, and params its Limit has
--   ids              every request carries a stamp (a permit's id)
--   own              load reads the state itself (vals are not read), and
--                    the call reads TIME only when it needs it (clock 0)
--   params(args, a)  the Limit read from args[a ..]
--   load(keys, k, vals, p) the state in keys[k ..], whose string values
--                    (MGET) are vals[k ..]
--   decide(st, p, n, mode, stamp) -> granted, remaining, retry_after µs,
--                    reset_after µs, delay µs; it updates st and sets
--                    st.dirty when there is something to write
--   save(st, p, reset, nonpeek) writes st (reset: µs until it is whole)
--   take(key, v, p, n, took) optional: one CONSUME of n on a state of
--                    one string key, whose value is v, as load, decide and
--                    save would make it, for one's common call and a
--                    batch's key of one CONSUME (took: see takes)
--   packed(r, rt, rs, d) optional: a take's reply in two integers, or
--                    nil (see fw.packed)
-- and its params (p) may hold
--   takes(keys, args, k, a, out, o, p), with own: a batch's keys of one
--                    take of one unit each, from keys[k] on, in a call that
--                    read the clock; it returns k, a and o past them, and
--                    the took that take is then passed (see fw.takes)
local algorithms = {}

-- limit returns the Limit that spec, one ARGV string, spells:
-- "<Algorithm + 1> <param> ..." (the params as the algorithm's file lists
-- them), as {A = its algorithm's table, p = its params}. Parsed once: a
-- loaded library keeps the last 256 between calls, so the common call
-- converts no number for its Limit (a script keeps them for its call).
-- What it returns is shared: no caller changes it, but to keep what it
-- derives from it. (A hot caller looks specs up itself first: a Lua
-- call costs more than the lookup.)
local specs, nspecs = {}, 0

local function limit(spec)
  local l = specs[spec]
  if l then return l end
  local f = {}
  for w in gmatch(spec, '%S+') do f[#f + 1] = w end
  local A = algorithms[tonumber(f[1])]
  if not A or #f ~= 1 + A.nparams then error('redlimit: malformed Limit "' .. spec .. '"') end
  l = {A = A, p = A.params(f, 2)}
  if nspecs == 256 then
    specs = {}
    nspecs = 0
  end
  specs[spec] = l
  nspecs = nspecs + 1
  return l
end

-- write sets key to value with a TTL of reset µs (at least 1 ms), and
-- returns the TTL (ms).
local function write(key, value, reset)
  local ttl = max(1, ceil(reset / 1000))
  call('SET', key, value, 'PX', fmt('%d', ttl))
  return ttl
end

-- keep lengthens the TTL of key, a state that did not change, to reset µs
-- when it is shorter, and returns the TTL it set (ms), or nil.
local function keep(key, reset)
  if reset <= 0 then return nil end
  local need = ceil(reset / 1000)
  if call('PTTL', key) < need - 1 then
    call('PEXPIRE', key, fmt('%d', need))
    return need
  end
  return nil
end

-- persist writes a string state, and returns the TTL it set (ms), or nil.
-- A state that changed gets a TTL of exactly the time until its quota is
-- whole (at least 1 ms): after that it no longer matters. A call that
-- changed nothing (a denial) writes nothing, unless the key would expire
-- before its quota is whole, which happens when its Limit changed to a
-- slower one: then the expiry of the state would hand out a fresh quota, so
-- the TTL is lengthened. A TTL within 1 ms of the need is rounding, not a
-- change. Only such a call reads the TTL; encode(st) is the changed value.
local function persist(st, reset, nonpeek, encode)
  if st.dirty then return write(st.key, encode(st), reset) end
  if nonpeek and st.found then return keep(st.key, reset) end
  return nil
end

-- A bucket's state counts the units taken from it, modulo POS, and a take
-- replies its count after it (its position) in place of retry_after, which
-- is 0 for a take. A give-back names its take's position: the units taken
-- since are the count now less the position.
local POS = 4503599627370496 -- 2^52

local function count(taken, n)
  return (taken + n) % POS
end

-- give_back is what a REFUND of n units taken at stamp, at position pos
-- (0: unknown), restores to a bucket st that is room (scaled units) short
-- of where it can go no further (a token bucket's full, a queue's empty).
-- Had the units never been taken, the bucket would be up to n further at
-- any time since, short only of what it lost standing against that end
-- meanwhile. A take before the state's epoch, or under another Limit
-- than the state's (the give-back names its take's), is owed nothing:
-- the bucket has been whole since (a full bucket's count starts again, as
-- a new state's does), or its Limit changed, and a take placed against
-- another Limit is not placed against this one. Otherwise the loss is known in
-- three cases, and else bounded so that a give-back never leaves the
-- bucket beyond the state without the take (TestGiveBackModelSweep):
--   nothing written since the take: its level since only moved towards
--     the end, so it lost exactly what it is now past room;
--   counted (pos known): the level since the take was
--     never further from room than now plus the units taken since, so the
--     loss is at most those units past room;
--   otherwise each tick since the take is counted as lost.
-- A give-back of the last take (none since) that restores it all leaves
-- the count as if it had never been taken, so that a later give-back of
-- an earlier take does not count it (take and refund alternating). A take
-- later than the state's now is of a clock that stepped back since: the
-- state may have been whole and made again in between, under an epoch
-- that reads as older than the take, so it is owed nothing
-- (TestRefundAfterExpiryAndClockStepBack: 3 units above without this).
local function give_back(st, p, n, stamp, pos, room)
  if stamp <= 0 or room <= 0 or st.changed or stamp > st.now or tonumber(st.epoch) > stamp then return 0 end
  local cost = n * p.period
  local give = cost
  if st.wt <= stamp - p.tick or st.wt > stamp then
    local refill = ceil(max(0, st.now - stamp) / p.tick) * p.rate
    give = cost - refill
    -- (While fewer than 2^51 units can have been taken since: the count
    -- wraps at 2^52.)
    if pos > 0 and (p.full + refill) / p.period < POS / 2 then
      give = max(give, room - (st.taken - pos) % POS * p.period)
    end
  end
  give = max(0, min(give, cost, room))
  if pos > 0 and give == cost and pos == st.taken then st.taken = count(st.taken, -n) end
  return give
end

-- corrupt stops the call on a value none of these scripts wrote.
local function corrupt(key)
  error('redlimit: ' .. key .. ' holds a value redlimit did not write')
end
