-- Token bucket: capacity tokens, initially full, refilled continuously at
-- rate per period; a request of n takes n tokens if there are n.
--
-- State    one string key, "<tokens> <time> <scale>": tokens in scaled
--          units (1/scale of a token, so the refill per tick is an
--          integer), negative while the bucket is in debt (CHARGE); time µs
--          at which tokens was true; scale the period they were scaled by
-- Limit    params (see limit in the prelude): period in ticks / g, rate / g (the refill per tick in
--          scaled units), capacity tokens, tick µs (1 unless the Limit is
--          too large for µs to be exact); g = gcd(period ticks, rate)
--
-- Time is Redis TIME with its microseconds, so 1 per hour and 100000 per
-- second are both exact. A Limit change carries the tokens over, rounded
-- down, and never above the new capacity. retry_after and reset_after are
-- measured from Redis' clock: after a clock step back they include the
-- step, so a client that waits retry_after is not denied again.
local tb = {nkeys = 1, nparams = 4}

function tb.params(args, a)
  local period, rate = tonumber(args[a]), tonumber(args[a + 1])
  -- (scale: the period as the spec spells it, which is how a state written
  -- under this Limit spells its scale; comparing the strings saves a
  -- tonumber on every call.)
  return {period = period, rate = rate, full = tonumber(args[a + 2]) * period, tick = tonumber(args[a + 3]),
    scale = args[a]}
end

function tb.load(keys, k, vals, p)
  local full = p.full
  -- (Every field is in the constructor: a table that grows rehashes.)
  local st = {key = keys[k], now = clock, t = clock, tokens = full, period = p.period, found = false, dirty = false}
  local v = vals[k]
  if not v then return st end
  local tokens, t, scale = match(v, '^(%-?%d+) (%d+) (%d+)$')
  if not scale then corrupt(keys[k]) end
  tokens, t = tonumber(tokens), tonumber(t)
  st.found = true
  if scale ~= p.scale then tokens = floor(tokens / tonumber(scale) * p.period) end
  local at = clock
  if t > clock then at = t; st.now = t end
  if tokens > full then tokens = full end
  -- Refill by whole ticks since t; the time keeps what is left of a tick.
  local rate, tick = p.rate, p.tick
  local ticks = floor((at - t) / tick)
  if tokens < full and ticks < ceil((full - tokens) / rate) then
    st.tokens = tokens + ticks * rate
    st.t = t + ticks * tick
  else
    st.t = at -- full (st.tokens)
  end
  return st
end

function tb.decide(st, p, n, mode, stamp)
  local period, rate, tick, full = p.period, p.rate, p.tick, p.full
  local tokens, granted = st.tokens, 0
  local cost = n * period
  if mode == CONSUME or mode == PEEK then
    if tokens >= cost then granted = n end
  elseif mode == REFUND then
    -- Had these units never been taken, the bucket would hold them now
    -- only as far as it has not refilled them since: each tick since the
    -- take is worth rate of them. So a late refund gives back less, and
    -- one after the bucket would have refilled anyway gives back nothing.
    local give = cost - ceil(max(0, st.now - stamp) / tick) * rate
    if give > 0 then tokens = min(full, tokens + give) end
  elseif mode == CHARGE then
    tokens = max(tokens - cost, -MAX_DEBT)
  elseif mode == ATMOST then
    granted = min(n, max(0, floor(tokens / period)))
  end -- (RENEW: nothing to keep)
  if granted > 0 and mode ~= PEEK then tokens = tokens - granted * period end
  if tokens ~= st.tokens then st.tokens, st.dirty = tokens, true end
  local retry, reset = 0, 0
  if granted == 0 and mode <= ATMOST then
    if mode == ATMOST then cost = period end
    retry = st.t + ceil((cost - tokens) / rate) * tick - clock
  end
  if tokens < full then reset = st.t + ceil((full - tokens) / rate) * tick - clock end
  local left = 0
  if tokens > 0 then left = floor(tokens / period) end
  return granted, left, retry, reset, 0
end

local function tb_encode(st)
  return fmt('%d %d %d', st.tokens, st.t, st.period)
end

function tb.save(st, p, reset, nonpeek)
  persist(st, reset, nonpeek, tb_encode)
end

algorithms[1] = tb
