-- Sliding window counter: approximates "at most rate units in any window of
-- length period" in O(1) memory. The estimate is the current fixed window's
-- count plus the previous window's count weighted by how much of it the
-- sliding window still overlaps. It assumes the previous window's requests
-- were spread evenly, so it can admit a little more or less than the exact
-- log around bursts.
--
-- State    one string key, "<start> <count> <previous>": the current
--          window's start µs, its count, the previous window's count
-- Limit    params (see limit in the prelude): period µs, rate units per window, tick µs (1 unless the
--          Limit is too large for µs to be exact)
--
-- The overlap is counted in whole ticks, rounded so that the previous
-- window weighs more, never less; all comparisons are multiplied through
-- by the period in ticks, so they are exact integer arithmetic (the client
-- checks that rate * period ticks < 2^51). A state whose window lies ahead
-- of Redis' clock refuses every request until the clock reaches it (a
-- debt, CHARGE, carried into later windows; or a clock step back). A
-- REFUND counts its units out of the window they were taken in, the
-- current or the previous one, and not at all once that has ended.
-- retry_after and reset_after are measured from Redis' clock.
local swc = {nkeys = 1, nparams = 3}

-- idiv is floor(a / b) for non-negative integers, exact even where the
-- double quotient rounds up to the next integer.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

function swc.params(args, a)
  local period, tick = tonumber(args[a]), tonumber(args[a + 2])
  local ticks = ceil(period / tick)
  return {period = period, rate = tonumber(args[a + 1]), tick = tick, ticks = ticks,
    most = floor(2 ^ 51 / ticks)}
end

function swc.load(keys, k, vals, p)
  local st = {key = keys[k], start = floor(clock / p.period) * p.period, count = 0, prev = 0}
  local v = vals[k]
  if not v then return st end
  local start, count, prev = match(v, '^(%d+) (%d+) (%d+)$')
  if not prev then corrupt(keys[k]) end
  start = tonumber(start)
  st.found = true
  -- (Counts far above this Limit's, after it was lowered, are capped where
  -- the arithmetic would stop being exact.)
  if clock < start + p.period then
    st.start, st.count, st.prev = start, min(tonumber(count), p.most), min(tonumber(prev), p.most)
    st.ahead = start > clock
  elseif clock < start + 2 * p.period then
    st.start, st.prev = start + p.period, min(tonumber(count), p.most)
  else
    st.start = max(st.start, start + 2 * p.period)
  end
  return st
end

function swc.decide(st, p, n, mode, stamp)
  local period, rate, ticks = p.period, p.rate, p.ticks
  local count, prev, granted = st.count, st.prev, 0
  local t0 = clock
  if st.ahead then t0 = st.start end
  local weight = ticks - floor((t0 - st.start) / p.tick)
  local budget = rate * ticks
  if mode == REFUND then
    if not st.ahead then
      if stamp >= st.start and stamp < st.start + period then
        count = count - min(count, n)
      elseif stamp >= st.start - period and stamp < st.start then
        prev = prev - min(prev, n)
      end
    end
  elseif mode == CHARGE then
    count = count + n
  elseif mode == RENEW or st.ahead then
    -- (nothing to keep; a window ahead refuses)
  elseif prev * weight + (count + n) * ticks <= budget then
    granted = n
  elseif mode == ATMOST then
    granted = min(n, idiv(max(0, budget - prev * weight - count * ticks), ticks))
  end
  if granted > 0 and mode ~= PEEK then count = count + granted end
  if count ~= st.count or prev ~= st.prev then
    st.count, st.prev, st.dirty = count, prev, true
    if mode == CHARGE and count > rate then
      -- A debt beyond the window's rate carries into the following windows,
      -- rate in each, each full window the previous one of the next.
      local k = min(ceil(count / rate) - 1, floor((2 ^ 52 - st.start) / period) - 2)
      st.start, st.count, st.prev = st.start + k * period, count - k * rate, rate
      st.ahead = st.start > clock
      count, prev = st.count, st.prev
      if st.ahead then t0 = st.start end
      weight = ticks - floor((t0 - st.start) / p.tick)
    end
  end
  local retry = 0
  if granted == 0 and mode <= ATMOST then
    local need = n
    if mode == ATMOST then need = 1 end
    if count + need <= rate then
      -- Wait in this window until prev's weight has shrunk enough, or for
      -- the next window, which this one's count then weighs in.
      local w = ticks
      if prev > 0 then w = min(ticks, idiv((rate - count - need) * ticks, prev)) end
      retry = min(st.start + (ticks - w) * p.tick, st.start + period) - clock
    else
      -- Wait for the next window, where this window's count is prev.
      local w = idiv((rate - need) * ticks, count)
      retry = st.start + period + min((ticks - w) * p.tick, period) - clock
    end
  end
  local reset, remaining = 0, 0
  if count > 0 then
    reset = st.start + 2 * period - clock
  elseif prev > 0 then
    reset = st.start + period - clock
  elseif st.ahead then
    reset = st.start - clock
  end
  if not st.ahead then
    -- What fits now: (budget - estimate) / ticks units.
    remaining = idiv(max(0, budget - prev * weight - count * ticks), ticks)
  end
  return granted, remaining, retry, reset, 0
end

local function swc_encode(st)
  return fmt('%d %d %d', st.start, st.count, st.prev)
end

function swc.save(st, p, reset, nonpeek)
  persist(st, reset, nonpeek, swc_encode)
end

algorithms[3] = swc
