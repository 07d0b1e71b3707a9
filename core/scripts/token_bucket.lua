-- Token bucket: capacity tokens, initially full, refilled continuously at
-- rate per period; a request of n takes n tokens if there are n.
--
-- State    one string key, "<tokens> <time> <scale>": tokens in scaled
--          units (1/scale of a token, so the refill per tick is an
--          integer), negative while the bucket is in debt (CHARGE); time µs
--          at which tokens was true; scale the period they were scaled by
-- Limit    ARGV: period in ticks / g, rate / g (the refill per tick in
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
  return {period = period, rate = rate, full = tonumber(args[a + 2]) * period, tick = tonumber(args[a + 3])}
end

function tb.load(keys, k, vals, p)
  local st = {key = keys[k], now = clock, t = clock, tokens = p.full}
  local v = vals[k]
  if not v then return st end
  local tokens, t, scale = match(v, '^(%-?%d+) (%d+) (%d+)$')
  if not scale then corrupt(keys[k]) end
  tokens, t, scale = tonumber(tokens), tonumber(t), tonumber(scale)
  st.found = true
  if scale ~= p.period then tokens = floor(tokens / scale * p.period) end
  if t > clock then st.now = t end
  tokens = min(tokens, p.full)
  -- Refill by whole ticks since t; the time keeps what is left of a tick.
  local ticks = floor((st.now - t) / p.tick)
  if tokens < p.full and ticks < ceil((p.full - tokens) / p.rate) then
    st.tokens = tokens + ticks * p.rate
    st.t = t + ticks * p.tick
  else
    st.t = st.now
  end
  return st
end

function tb.decide(st, p, n, mode, stamp)
  local tokens, cost, granted = st.tokens, n * p.period, 0
  if mode == REFUND then
    -- Had these units never been taken, the bucket would hold them now
    -- only as far as it has not refilled them since: each tick since the
    -- take is worth rate of them. So a late refund gives back less, and
    -- one after the bucket would have refilled anyway gives back nothing.
    local give = cost - ceil(max(0, st.now - stamp) / p.tick) * p.rate
    if give > 0 then tokens = min(p.full, tokens + give) end
  elseif mode == CHARGE then
    tokens = max(tokens - cost, -MAX_DEBT)
  elseif mode == RENEW then
    -- (nothing to keep)
  elseif tokens >= cost then
    granted = n
  elseif mode == ATMOST then
    granted = max(0, floor(tokens / p.period))
  end
  if granted > 0 and mode ~= PEEK then tokens = tokens - granted * p.period end
  if tokens ~= st.tokens then st.tokens, st.dirty = tokens, true end
  local retry, reset = 0, 0
  if granted == 0 and mode <= ATMOST then
    if mode == ATMOST then cost = p.period end
    retry = st.t + ceil((cost - tokens) / p.rate) * p.tick - clock
  end
  if tokens < p.full then reset = st.t + ceil((p.full - tokens) / p.rate) * p.tick - clock end
  return granted, max(0, floor(tokens / p.period)), retry, reset, 0
end

local function tb_encode(st)
  return fmt('%d %d %d', st.tokens, st.t, st.period)
end

function tb.save(st, p, reset, nonpeek)
  st.period = p.period
  persist(st, reset, nonpeek, tb_encode)
end

algorithms[1] = tb
