-- Leaky bucket as a queue (traffic shaping): requests leave at an even pace
-- of rate per period; a request is admitted with the delay it must wait
-- before it proceeds, while at most capacity units are queued.
--
-- State    one string key, "<queued> <time> <scale> <taken> <epoch>":
--          queued units in scaled units (1/scale of a unit; more than
--          capacity while the queue is in debt, CHARGE), time µs at which
--          queued was true, scale "<period>:<rate>" of the Limit they were
--          kept under (period: the scale), and the
--          units taken since epoch as the token bucket counts them (an
--          empty queue starts a new epoch)
-- Limit    params (see limit in the prelude): period in ticks / g, rate / g (the drain per tick in
--          scaled units), capacity units, max_delay µs (the longest delay to
--          hand out; 0: only capacity bounds it), tick µs (1 unless the
--          Limit is too large for µs to be exact), debt (how far the
--          queue may hold more than capacity, in scaled units: the client's
--          bound, which keeps sums exact and waits within about 142 years);
--          g = gcd(period ticks, rate)
--
-- The wait is computed for the n this request needs, not from the nearest
-- record. remaining counts what max_delay lets in, not only queue room. delay, retry_after and reset_after are measured from Redis'
-- clock: after a clock step back they include the step, and max_delay is
-- held to that.
local lb = {nkeys = 1, nparams = 6, pos = true}

function lb.params(args, a)
  local period, rate = tonumber(args[a]), tonumber(args[a + 1])
  -- (scale: "<period>:<rate>", as the token bucket's.)
  return {period = period, rate = rate, full = tonumber(args[a + 2]) * period, scale = args[a] .. ':' .. args[a + 1],
    max_delay = tonumber(args[a + 3]), tick = tonumber(args[a + 4]), debt = tonumber(args[a + 5])}
end

function lb.load(keys, k, vals, p)
  local st = {key = keys[k], now = clock, t = clock, queued = 0, wt = 0, taken = 0, epoch = clock, changed = false}
  local v = vals[k]
  if not v then return st end
  local queued, t, scale, taken, epoch = match(v, '^(%d+) (%d+) (%S+) (%d+) (%d+)$')
  if not epoch then corrupt(keys[k]) end
  queued, t = tonumber(queued), tonumber(t)
  st.found, st.wt, st.taken, st.epoch = true, t, tonumber(taken), epoch -- (epoch: see tb_at)
  if t > clock then st.now = t end
  if scale ~= p.scale then
    local period = tonumber(match(scale, '^(%d+):%d+$'))
    if not period then corrupt(keys[k]) end
    if period ~= p.period then queued = ceil(queued / period * p.period) end
    st.epoch, st.changed = st.now + 1, true -- (+ 1: see tb_at)
  end
  -- Drain by whole ticks since t; the time keeps what is left of a tick.
  local ticks = floor((st.now - t) / p.tick)
  if queued > 0 and ticks < ceil(queued / p.rate) then
    st.queued = queued - ticks * p.rate
    st.t = t + ticks * p.tick
  else
    -- (Empty, it owes no take anything: its count starts again.)
    st.t, st.taken, st.epoch = st.now, 0, st.now
  end
  return st
end

function lb.decide(st, p, n, mode, stamp, pos)
  local queued = st.queued
  if mode == REFUND then
    -- As for the token bucket (see give_back): the queue without these
    -- units, drained linearly and never below empty. An empty queue's
    -- time is Redis' clock, as a new state's is: a time ahead of it (a
    -- clock step back) would hold back max_delay's room for nothing.
    queued = queued - give_back(st, p, n, stamp, pos, queued)
    if queued == 0 and st.queued > 0 then st.t, st.taken, st.epoch = clock, 0, clock end
  elseif mode == CHARGE then
    -- (Compared first, as the token bucket does.)
    local most = p.full + p.debt
    if n * p.period >= most - queued then queued = max(queued, most) else queued = queued + n * p.period end
  end
  -- The queue ahead drains at this instant; then this request leaves.
  local delay = 0
  if queued > 0 then delay = st.t + ceil(queued / p.rate) * p.tick - clock end
  local granted, retry = 0, 0
  if mode <= ATMOST then
    local want = n
    if mode == ATMOST then want = min(n, floor((p.full - queued) / p.period)) end
    if want < 1 then want = 1 end
    local over = queued + want * p.period - p.full
    if over > 0 then retry = st.t + ceil(over / p.rate) * p.tick - clock end
    if p.max_delay > 0 and delay > p.max_delay then
      retry = max(retry, delay - p.max_delay)
    end
    if retry == 0 then
      granted = want
      if mode ~= PEEK then queued = queued + want * p.period end
    end
  end
  if queued ~= st.queued then
    if queued > st.queued then st.taken = count(st.taken, ceil((queued - st.queued) / p.period)) end
    st.queued, st.dirty = queued, true
    st.wt = st.t
  end
  local reset = 0
  if queued > 0 then reset = st.t + ceil(queued / p.rate) * p.tick - clock end
  if granted == 0 then delay = 0 end
  -- Remaining: the units of 1 that would still be admitted at this
  -- instant, by room in the queue and, under max_delay, by the wait: the
  -- k-th more leaves after ceil((queued + (k - 1) period) / rate) ticks,
  -- which must be at most the ticks of max_delay from the record's time.
  local left = floor((p.full - queued) / p.period)
  if p.max_delay > 0 then
    local room = floor((p.max_delay + clock - st.t) / p.tick) * p.rate - queued
    if room < 0 then left = 0 else left = min(left, floor(room / p.period) + 1) end
  end
  if granted > 0 and mode ~= PEEK then retry = st.taken end
  return granted, max(0, left), retry, reset, delay
end

local function lb_encode(st)
  if type_(st.epoch) == 'string' then return fmt('%d %d %s %d %s', st.queued, st.t, st.scale, st.taken, st.epoch) end
  return fmt('%d %d %s %d %d', st.queued, st.t, st.scale, st.taken, st.epoch)
end

function lb.save(st, p, reset, nonpeek)
  st.scale = p.scale
  persist(st, reset, nonpeek, lb_encode)
end

algorithms[5] = lb
