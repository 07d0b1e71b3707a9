-- Token bucket: capacity tokens, initially full, refilled continuously at
-- rate per period; a request of n takes n tokens if there are n.
--
-- State    one string key, "<tokens> <time> <scale> <end>": tokens in scaled
--          units (1/scale of a token, so the refill per µs is an integer),
--          time µs at which tokens was true, scale the period they were
--          scaled by, end the key's expiry in ms (see persist)
-- Limit    ARGV: period µs / g, rate / g (the refill per µs in scaled
--          units), capacity tokens; g = gcd(period µs, rate)
--
-- The time is Redis TIME with its microseconds (never whole seconds), so
-- 1 per hour and 100000 per second are both exact. A Limit change carries
-- the tokens over, rounded down. retry_after and reset_after are measured
-- from Redis' clock: after a clock step back they include the step, so a
-- client that waits retry_after is not denied again.
local tb = {nkeys = 1, nparams = 3}

function tb.params(a)
  local period, rate = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  return {period = period, rate = rate, full = tonumber(ARGV[a + 2]) * period}
end

function tb.load(k, vals, p)
  local st = {key = KEYS[k], now = clock, tokens = p.full, e = 0}
  local v = vals[k]
  if not v then return st end
  local raw, tokens, t, scale, e = match(v, '^((%d+) (%d+) (%d+)) (%d+)$')
  if not e then corrupt(KEYS[k]) end
  tokens, t, scale = tonumber(tokens), tonumber(t), tonumber(scale)
  st.e, st.raw = tonumber(e), raw
  if scale ~= p.period then tokens = floor(tokens / scale * p.period) end
  if t > clock then st.now = t end
  local missing = p.full - tokens
  if missing > 0 and st.now - t < ceil(missing / p.rate) then
    st.tokens = tokens + (st.now - t) * p.rate
  end
  return st
end

function tb.decide(st, p, n, mode)
  local tokens, cost, granted = st.tokens, n * p.period, 0
  if mode == REFUND then
    tokens = min(p.full, tokens + cost)
  elseif tokens >= cost then
    granted = n
  elseif mode == ATMOST then
    granted = floor(tokens / p.period)
  end
  if granted > 0 and mode ~= PEEK then tokens = tokens - granted * p.period end
  if tokens ~= st.tokens then st.tokens, st.dirty = tokens, true end
  local skew = st.now - clock
  local retry = 0
  if granted == 0 and mode ~= REFUND then
    if mode == ATMOST then cost = p.period end
    retry = ceil((cost - tokens) / p.rate) + skew
  end
  local reset = ceil((p.full - tokens) / p.rate)
  if reset > 0 then reset = reset + skew end
  return granted, floor(tokens / p.period), retry, reset, 0
end

local function tb_encode(st, e)
  return fmt('%d %d %d %d', st.tokens, st.now, st.period, e)
end

function tb.save(st, p, reset, nonpeek)
  st.period = p.period
  persist(st, reset, nonpeek, tb_encode)
end

algorithms[1] = tb
