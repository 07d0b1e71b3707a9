-- Sliding window counter: approximates "at most rate units in any window of
-- length period" in O(1) memory. The estimate is the current fixed window's
-- count plus the previous window's count weighted by how much of it the
-- sliding window still overlaps. It assumes the previous window's requests
-- were spread evenly, so it can admit a little more or less than the exact
-- log around bursts.
--
-- State    one string key, "<start> <count> <previous> <end>": the current
--          window's start µs, its count, the previous window's count, the
--          key's expiry in ms (see persist)
-- Limit    ARGV: period µs, rate units per window
--
-- All comparisons are multiplied through by period, so they are exact
-- integer arithmetic (the client checks that rate * period < 2^53).
-- retry_after and reset_after are measured from Redis' clock, so after a
-- clock step back they include the step. A refund takes units off the
-- current window first: a refund comes soon after its request.
local swc = {nkeys = 1, nparams = 2}

-- idiv is floor(a / b) for non-negative integers, exact even where the
-- double quotient rounds up to the next integer.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

function swc.params(a)
  return {period = tonumber(ARGV[a]), rate = tonumber(ARGV[a + 1])}
end

function swc.load(k, vals, p)
  local st = {key = KEYS[k], now = clock, start = floor(clock / p.period) * p.period, count = 0, prev = 0, e = 0}
  local v = vals[k]
  if not v then return st end
  local raw, start, count, prev, e = match(v, '^((%d+) (%d+) (%d+)) (%d+)$')
  if not e then corrupt(KEYS[k]) end
  start = tonumber(start)
  st.e, st.raw = tonumber(e), raw
  if start > clock then st.now = start end
  if st.now < start + p.period then
    st.start, st.count, st.prev = start, tonumber(count), tonumber(prev)
  elseif st.now < start + 2 * p.period then
    st.start, st.prev = start + p.period, tonumber(count)
  else
    st.start = floor(st.now / p.period) * p.period
  end
  return st
end

function swc.decide(st, p, n, mode)
  local period, rate = p.period, p.rate
  local count, prev, granted = st.count, st.prev, 0
  local elapsed = st.now - st.start
  local weight = period - elapsed
  local budget = rate * period
  if mode == REFUND then
    local from_count = min(count, n)
    count, prev = count - from_count, max(0, prev - (n - from_count))
  elseif prev * weight + (count + n) * period <= budget then
    granted = n
  elseif mode == ATMOST then
    granted = min(n, idiv(max(0, budget - prev * weight - count * period), period))
  end
  if granted > 0 and mode ~= PEEK then count = count + granted end
  if count ~= st.count or prev ~= st.prev then st.count, st.prev, st.dirty = count, prev, true end
  local skew = st.now - clock
  local retry = 0
  if granted == 0 and mode ~= REFUND then
    if mode == ATMOST then n = 1 end
    if count + n <= rate then
      -- Wait in this window until prev's weight has shrunk enough.
      retry = period - idiv((rate - count - n) * period, prev) - elapsed
    else
      -- Wait for the next window, where this window's count is prev.
      retry = period - elapsed + max(0, period - idiv((rate - n) * period, count))
    end
    retry = retry + skew
  end
  local reset = 0
  if count > 0 then
    reset = 2 * period - elapsed + skew
  elseif prev > 0 then
    reset = weight + skew
  end
  -- What fits now: (budget - estimate) / period units.
  return granted, idiv(max(0, budget - prev * weight - count * period), period), retry, reset, 0
end

local function swc_encode(st, e)
  return fmt('%d %d %d %d', st.start, st.count, st.prev, e)
end

function swc.save(st, p, reset, nonpeek)
  persist(st, reset, nonpeek, swc_encode)
end

algorithms[3] = swc
