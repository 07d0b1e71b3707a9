-- Fixed window: at most rate units per window of length period. Windows are
-- aligned to the Unix epoch, so every instance agrees on where one starts.
--
-- State    one string key, "<start> <count> <end>": the current window's
--          start µs, the units admitted in it, the key's expiry in ms (see
--          persist)
-- Limit    ARGV: period µs, rate units per window
--
-- The counter lives beside its window's start, not in a key per window, so
-- a clock step back keeps counting in the later window and a longer period
-- extends the current window instead of opening a fresh one.
-- retry_after and reset_after are measured from Redis' clock, so after a
-- clock step back they include the step.
local fw = {nkeys = 1, nparams = 2}

function fw.params(a)
  return {period = tonumber(ARGV[a]), rate = tonumber(ARGV[a + 1])}
end

function fw.load(k, vals, p)
  local st = {key = KEYS[k], now = clock, start = floor(clock / p.period) * p.period, count = 0, e = 0}
  local v = vals[k]
  if not v then return st end
  local raw, start, count, e = match(v, '^((%d+) (%d+)) (%d+)$')
  if not e then corrupt(KEYS[k]) end
  start = tonumber(start)
  st.e, st.raw = tonumber(e), raw
  if start > clock then st.now = start end
  if st.now < start + p.period then
    st.start, st.count = start, tonumber(count)
  else
    st.start = max(floor(st.now / p.period) * p.period, start + p.period)
  end
  return st
end

function fw.decide(st, p, n, mode)
  local count, granted = st.count, 0
  if mode == REFUND then
    count = max(0, count - n)
  elseif count + n <= p.rate then
    granted = n
  elseif mode == ATMOST then
    granted = p.rate - count
  end
  if granted > 0 and mode ~= PEEK then count = count + granted end
  if count ~= st.count then st.count, st.dirty = count, true end
  local window_end = st.start + p.period - clock
  local retry, reset = 0, 0
  if granted == 0 and mode ~= REFUND then retry = window_end end
  if count > 0 then reset = window_end end
  return granted, max(0, p.rate - count), retry, reset, 0
end

local function fw_encode(st, e)
  return fmt('%d %d %d', st.start, st.count, e)
end

function fw.save(st, p, reset, nonpeek)
  persist(st, reset, nonpeek, fw_encode)
end

algorithms[4] = fw
