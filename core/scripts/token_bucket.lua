-- Token bucket: capacity tokens, initially full, refilled continuously at
-- rate per period; a request of n takes n tokens if there are n.
--
-- State    one string key, "<tokens> <time> <scale>": tokens in scaled
--          units (1/scale of a token, so the refill per tick is an
--          integer), negative while the bucket is in debt (CHARGE); time µs
--          at which tokens was true; scale the period they were scaled by
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
local tb = {nkeys = 1, nparams = 5}

function tb.params(args, a)
  local period, rate = tonumber(args[a]), tonumber(args[a + 1])
  -- (scale: the period as the spec spells it, which is how a state written
  -- under this Limit spells its scale; comparing the strings saves a
  -- tonumber on every call.)
  return {period = period, rate = rate, full = tonumber(args[a + 2]) * period, tick = tonumber(args[a + 3]),
    debt = tonumber(args[a + 4]), scale = args[a]}
end

-- tb_at is the bucket that state value v (nil: no state) holds at clock:
-- its tokens, the time t they are true at (t keeps what is left of a
-- tick), and now, clock or the state's own later time.
local function tb_at(p, key, v)
  local full = p.full
  if not v then return full, clock, clock end
  local tokens, t, scale = match(v, '^(%-?%d+) (%d+) (%d+)$')
  if not scale then corrupt(key) end
  tokens, t = tonumber(tokens), tonumber(t)
  if scale ~= p.scale then tokens = floor(tokens / tonumber(scale) * p.period) end
  local now = clock
  if t > clock then now = t end
  if tokens > full then tokens = full end
  -- Refill by whole ticks since t.
  local rate, tick = p.rate, p.tick
  local ticks = floor((now - t) / tick)
  if tokens < full and ticks < ceil((full - tokens) / rate) then
    return tokens + ticks * rate, t + ticks * tick, now
  end
  return full, now, now
end

-- tb_waits are retry_after for need scaled units (0 when they are there)
-- and reset_after, of a bucket of tokens at t.
local function tb_waits(p, tokens, t, need)
  local retry, reset = 0, 0
  if need > tokens then retry = t + ceil((need - tokens) / p.rate) * p.tick - clock end
  if tokens < p.full then reset = t + ceil((p.full - tokens) / p.rate) * p.tick - clock end
  return retry, reset
end

local function tb_value(tokens, t, period)
  return fmt('%d %d %d', tokens, t, period)
end

function tb.load(keys, k, vals, p)
  local tokens, t, now = tb_at(p, keys[k], vals[k])
  -- (Every field is in the constructor: a table that grows rehashes.)
  -- (wt: the time the state was written at, which tells a refund whether
  -- anything was written since its take.)
  local wt = vals[k] and tonumber(match(vals[k], '^%-?%d+ (%d+) ')) or 0
  return {key = keys[k], now = now, t = t, tokens = tokens, period = p.period, found = vals[k] ~= nil, dirty = false, wt = wt}
end

function tb.decide(st, p, n, mode, stamp)
  local period, full = p.period, p.full
  local tokens, granted = st.tokens, 0
  local cost = n * period
  if mode == CONSUME or mode == PEEK then
    if tokens >= cost then granted = n end
  elseif mode == REFUND then
    -- Nothing written since the take: had these units never been taken,
    -- the bucket would hold them now on top of what it holds, up to full
    -- (refill is linear and capped), at any time after the take. Written
    -- since (others took), that bucket may have stood full meanwhile and
    -- lost refill: each tick since the take is counted as lost, so that
    -- units given back never fund more than the Limit (see docs/limits.md).
    -- (A stamp of 0 names no decision: a Result made by hand, or one the
    -- local fallback decided, whose units Redis never took.)
    local give = cost
    if st.wt <= stamp - p.tick or st.wt > stamp then give = cost - ceil(max(0, st.now - stamp) / p.tick) * p.rate end
    if stamp > 0 and give > 0 and tokens < full then tokens = min(full, tokens + give) end
  elseif mode == CHARGE then
    -- (Compared first: under several layers, n may be more than this
    -- bucket's deepest debt, and cost then more than 2^53.)
    if cost >= tokens + p.debt then tokens = min(tokens, -p.debt) else tokens = tokens - cost end
  elseif mode == ATMOST then
    granted = min(n, max(0, floor(tokens / period)))
  end -- (RENEW: nothing to keep)
  if granted > 0 and mode ~= PEEK then tokens = tokens - granted * period end
  if tokens ~= st.tokens then
    st.tokens, st.dirty = tokens, true
    st.wt = st.t
  end
  local need = 0
  if granted == 0 and mode == ATMOST then need = period elseif granted == 0 and mode <= ATMOST then need = cost end
  local retry, reset = tb_waits(p, tokens, st.t, need)
  local left = 0
  if tokens > 0 then left = floor(tokens / period) end
  return granted, left, retry, reset, 0
end

local function tb_encode(st)
  return tb_value(st.tokens, st.t, st.period)
end

function tb.save(st, p, reset, nonpeek)
  persist(st, reset, nonpeek, tb_encode)
end

-- take is one CONSUME of n on one key, one's common call: what load,
-- decide and save do, with no table for the state (a tenth of the call's
-- Lua time, measured in a loop of 200000 on redis-server 7.0).
function tb.take(key, v, p, n)
  local tokens, t = tb_at(p, key, v)
  local cost, granted = n * p.period, 0
  if tokens >= cost then
    granted = n
    tokens = tokens - cost
  end
  local need = cost
  if granted > 0 then need = 0 end
  local retry, reset = tb_waits(p, tokens, t, need)
  if granted > 0 then
    write(key, tb_value(tokens, t, p.period), reset)
  elseif v then
    keep(key, reset)
  end
  local left = 0
  if tokens > 0 then left = floor(tokens / p.period) end
  return granted, left, retry, reset, 0
end

algorithms[1] = tb
