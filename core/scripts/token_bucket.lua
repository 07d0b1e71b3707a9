-- Token bucket: capacity tokens, initially full, refilled continuously at
-- rate per period; a request of n takes n tokens if there are n.
--
-- State    one string key, "<tokens> <time> <period>:<rate>:<capacity>
--          <taken> <epoch>": tokens in scaled units (1/period of a token,
--          so the refill per tick is an integer), negative while the bucket
--          is in debt (CHARGE); time µs at which tokens was true; the
--          Limit they were kept under (its params); taken the
--          units taken since epoch, the µs this count began (the bucket
--          was last found full, or its Limit changed), modulo 2^52 (see
--          POS)
-- Limit    params (see limit in the prelude): period in ticks / g, rate / g (the refill per tick in
--          scaled units), capacity tokens, tick µs (1 unless the Limit is
--          too large for µs to be exact), debt (the deepest debt, in scaled
--          units: the client's bound, which keeps sums exact and waits
--          within about 142 years); g = gcd(period ticks, rate)
--
-- Time is Redis TIME with its microseconds, so 1 per hour and 100000 per
-- second are both exact. A Limit change carries the tokens over, rounded
-- down, and never above the new capacity. retry_after and reset_after are
-- measured from Redis' clock: after a clock step back they include the
-- step, so a client that waits retry_after is not denied again.
local tb = {nkeys = 1, nparams = 5, pos = true}

function tb.params(args, a)
  local period, rate = tonumber(args[a]), tonumber(args[a + 1])
  -- (scale: "<period>:<rate>:<capacity>" as the spec spells them, which
  -- is how a state written under this Limit spells its scale; comparing
  -- the strings saves a tonumber on every call, and tells any change of
  -- the Limit, which starts a new epoch: its takes were placed against
  -- another bucket.)
  return {period = period, rate = rate, full = tonumber(args[a + 2]) * period, tick = tonumber(args[a + 3]),
    debt = tonumber(args[a + 4]), scale = args[a] .. ':' .. args[a + 1] .. ':' .. args[a + 2]}
end

-- tb_at is the bucket that state value v (nil: no state) holds at clock:
-- its tokens, the time t they are true at (t keeps what is left of a
-- tick), now, clock or the state's own later time, and its count of units
-- taken since its epoch. A Limit change starts a new epoch.
local function tb_at(p, key, v)
  local full = p.full
  if not v then return full, clock, clock, 0, clock end
  local tokens, t, scale, taken, epoch = match(v, '^(%-?%d+) (%d+) (%S+) (%d+) (%d+)$')
  if not epoch then corrupt(key) end
  -- (The epoch stays the string it was unless it changes: only a
  -- give-back reads it, and a take writes it back as it found it.)
  tokens, t, taken = tonumber(tokens), tonumber(t), tonumber(taken)
  local now = clock
  if t > clock then now = t end
  local changed = scale ~= p.scale
  if changed then
    local period = tonumber(match(scale, '^(%d+):%d+:%d+$'))
    if not period then corrupt(key) end
    if period ~= p.period then tokens = floor(tokens / period * p.period) end
    -- (A µs past now: a take before the change, even at this instant on a
    -- clock that stands still or stepped back, is of another epoch.)
    epoch = now + 1
  end
  if tokens > full then tokens = full end
  -- Refill by whole ticks since t.
  local rate, tick = p.rate, p.tick
  local ticks = floor((now - t) / tick)
  if tokens < full and ticks < ceil((full - tokens) / rate) then
    return tokens + ticks * rate, t + ticks * tick, now, taken, epoch, changed
  end
  -- (Full, it owes no take anything: its count starts again, as a new
  -- state's would, and stays short.)
  return full, now, now, 0, now, changed
end

-- tb_waits are retry_after for need scaled units (0 when they are there)
-- and reset_after, of a bucket of tokens at t.
local function tb_waits(p, tokens, t, need)
  local retry, reset = 0, 0
  if need > tokens then retry = t + ceil((need - tokens) / p.rate) * p.tick - clock end
  if tokens < p.full then reset = t + ceil((p.full - tokens) / p.rate) * p.tick - clock end
  return retry, reset
end

local function tb_value(tokens, t, scale, taken, epoch)
  if type_(epoch) == 'string' then return fmt('%d %d %s %d %s', tokens, t, scale, taken, epoch) end
  return fmt('%d %d %s %d %d', tokens, t, scale, taken, epoch)
end

function tb.load(keys, k, vals, p)
  local tokens, t, now, taken, epoch, changed = tb_at(p, keys[k], vals[k])
  -- (Every field is in the constructor: a table that grows rehashes.)
  -- (wt: the time the state was written at, which tells a refund whether
  -- anything was written since its take.)
  local wt = vals[k] and tonumber(match(vals[k], '^%-?%d+ (%d+) ')) or 0
  return {key = keys[k], now = now, t = t, tokens = tokens, scale = p.scale, found = vals[k] ~= nil, dirty = false, wt = wt,
    taken = taken, epoch = epoch, changed = changed}
end

function tb.decide(st, p, n, mode, stamp, pos)
  local period, full = p.period, p.full
  local tokens, granted = st.tokens, 0
  local cost = n * period
  if mode == CONSUME or mode == PEEK then
    if tokens >= cost then granted = n end
  elseif mode == REFUND then
    -- (A stamp of 0 names no decision: a Result made by hand, or one the
    -- local fallback decided, whose units Redis never took.)
    tokens = tokens + give_back(st, p, n, stamp, pos, full - tokens)
    if tokens == full then st.taken, st.epoch = 0, st.now end
  elseif mode == CHARGE then
    -- (Compared first: under several layers, n may be more than this
    -- bucket's deepest debt, and cost then more than 2^53.)
    if cost >= tokens + p.debt then tokens = min(tokens, -p.debt) else tokens = tokens - cost end
  elseif mode == ATMOST then
    granted = min(n, max(0, floor(tokens / period)))
  end -- (RENEW: nothing to keep)
  if granted > 0 and mode ~= PEEK then tokens = tokens - granted * period end
  if tokens ~= st.tokens then
    if tokens < st.tokens then st.taken = count(st.taken, ceil((st.tokens - tokens) / period)) end
    st.tokens, st.dirty = tokens, true
    st.wt = st.t
  end
  local need = 0
  if granted == 0 and mode == ATMOST then need = period elseif granted == 0 and mode <= ATMOST then need = cost end
  local retry, reset = tb_waits(p, tokens, st.t, need)
  local left = 0
  if tokens > 0 then left = floor(tokens / period) end
  if granted > 0 and mode ~= PEEK then retry = st.taken end
  return granted, left, retry, reset, 0
end

local function tb_encode(st)
  return tb_value(st.tokens, st.t, st.scale, st.taken, st.epoch)
end

function tb.save(st, p, reset, nonpeek)
  persist(st, reset, nonpeek, tb_encode)
end

-- take is one CONSUME of n on one key, one's common call: what load,
-- decide and save do, with no table for the state (a tenth of the call's
-- Lua time, measured in a loop of 200000 on redis-server 7.0).
function tb.take(key, v, p, n)
  local tokens, t, _, taken, epoch = tb_at(p, key, v)
  local cost, granted = n * p.period, 0
  if tokens >= cost then
    granted = n
    tokens = tokens - cost
    taken = (taken + n) % POS
  end
  local need = cost
  if granted > 0 then need = 0 end
  local retry, reset = tb_waits(p, tokens, t, need)
  if granted > 0 then
    write(key, tb_value(tokens, t, p.scale, taken, epoch), reset)
    retry = taken
  elseif v then
    keep(key, reset)
  end
  local left = 0
  if tokens > 0 then left = floor(tokens / p.period) end
  return granted, left, retry, reset, 0
end

algorithms[1] = tb
