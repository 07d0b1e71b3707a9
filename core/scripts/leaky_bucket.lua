-- Leaky bucket as a queue (traffic shaping): requests leave at an even pace
-- of rate per period; a request is admitted with the delay it must wait
-- before it proceeds, while at most capacity units are queued.
--
-- State    one string key, "<queued> <time> <scale> <end>": queued units in
--          scaled units (1/scale of a unit), time µs at which queued was
--          true, scale the period they were scaled by, end the key's expiry
--          in ms (see persist)
-- Limit    ARGV: period µs / g, rate / g (the drain per µs in scaled units),
--          capacity units, max_delay µs (the longest delay to hand out; 0:
--          only capacity bounds it); g = gcd(period µs, rate)
--
-- The wait is computed for the n this request needs, not from the nearest
-- record. delay, retry_after and reset_after are measured from Redis'
-- clock: after a clock step back they include the step, and max_delay is
-- held to that.
local lb = {nkeys = 1, nparams = 4}

function lb.params(a)
  local period, rate = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  return {period = period, rate = rate, full = tonumber(ARGV[a + 2]) * period, max_delay = tonumber(ARGV[a + 3])}
end

function lb.load(k, vals, p)
  local st = {key = KEYS[k], now = clock, queued = 0, e = 0}
  local v = vals[k]
  if not v then return st end
  local raw, queued, t, scale, e = match(v, '^((%d+) (%d+) (%d+)) (%d+)$')
  if not e then corrupt(KEYS[k]) end
  queued, t, scale = tonumber(queued), tonumber(t), tonumber(scale)
  st.e, st.raw = tonumber(e), raw
  if scale ~= p.period then queued = ceil(queued / scale * p.period) end
  if t > clock then st.now = t end
  if st.now - t < ceil(queued / p.rate) then
    st.queued = queued - (st.now - t) * p.rate
  end
  return st
end

function lb.decide(st, p, n, mode)
  local queued, skew = st.queued, st.now - clock
  if mode == REFUND then
    queued = max(0, queued - n * p.period)
  end
  -- The queue ahead drains in delay µs; then this request leaves.
  local delay = ceil(queued / p.rate)
  if delay > 0 then delay = delay + skew end
  local granted, retry = 0, 0
  if mode ~= REFUND then
    local want = n
    if mode == ATMOST then want = min(n, floor((p.full - queued) / p.period)) end
    if want < 1 then want = 1 end
    if queued + want * p.period > p.full then
      retry = ceil((queued + want * p.period - p.full) / p.rate) + skew
    end
    if p.max_delay > 0 and delay > p.max_delay then
      retry = max(retry, delay - p.max_delay)
    end
    if retry == 0 then
      granted = want
      if mode ~= PEEK then queued = queued + want * p.period end
    end
  end
  if queued ~= st.queued then st.queued, st.dirty = queued, true end
  local reset = ceil(queued / p.rate)
  if reset > 0 then reset = reset + skew end
  if granted == 0 then delay = 0 end
  return granted, max(0, floor((p.full - queued) / p.period)), retry, reset, delay
end

local function lb_encode(st, e)
  return fmt('%d %d %d %d', st.queued, st.now, st.period, e)
end

function lb.save(st, p, reset, nonpeek)
  st.period = p.period
  persist(st, reset, nonpeek, lb_encode)
end

algorithms[5] = lb
