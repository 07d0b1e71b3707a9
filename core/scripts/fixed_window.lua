-- Fixed window: at most rate units per window. Windows are aligned to the
-- Unix epoch (multiples of period), so every instance agrees on where one
-- starts; or, for a calendar Limit, they are the calendar days, weeks or
-- months whose starts the client computes in its time zone and sends.
--
-- State    one string key: "<start> <count>" (period windows) or
--          "<start> <wend> <count>[ <ordinal>]" (calendar windows): the
--          window's start and end µs, the units admitted in it (above rate
--          after the Limit was lowered, or in debt), and, for a debt
--          (count above rate), the window's ordinal
-- Limit    params (see limit in the prelude), period windows: period µs, rate units per window
--          calendar windows: rate, then b1 < b2 < b3 < b4, the starts (µs)
--          of four consecutive windows, the client's current one second,
--          then o1 < o2 < o3 < o4, their ordinals (the days, ISO weeks or
--          months since 1970 of the dates that name them)
--
-- The counter lives beside its window's start, not in a key per window, so
-- a longer period extends the current window instead of opening a fresh
-- one. A state whose window lies ahead of Redis' clock refuses every
-- request until the clock reaches it: it holds a debt (CHARGE) carried
-- into later windows, or Redis' clock stepped back. A calendar debt stays
-- in its window instead, and the windows after it pay it, rate in each,
-- counted by their ordinals (see cw.load): the client names only four
-- windows, and a debt may outlast them. A REFUND counts its
-- units out only if they were taken in the state's window: units of a
-- window that has ended left with it. retry_after and reset_after are
-- measured from Redis' clock.
local fw = {nkeys = 1, nparams = 2}
local cw = {nkeys = 1, nparams = 9}

function fw.params(args, a)
  return {period = tonumber(args[a]), rate = tonumber(args[a + 1])}
end

function cw.params(args, a)
  return {rate = tonumber(args[a]),
    b = {tonumber(args[a + 1]), tonumber(args[a + 2]), tonumber(args[a + 3]), tonumber(args[a + 4])},
    o = {tonumber(args[a + 5]), tonumber(args[a + 6]), tonumber(args[a + 7]), tonumber(args[a + 8])}}
end

-- cw_window returns the index in p.b of the calendar window holding t.
local function cw_window(p, t)
  local b = p.b
  if t < b[1] or t >= b[4] then
    error('redlimit: Redis TIME is more than a calendar window away from the client clock')
  end
  if t < b[2] then return 1 end
  if t < b[3] then return 2 end
  return 3
end

-- fw_at is the window that state value v (nil: no state) counts in at
-- clock: its start and end, the units counted in it, and whether it lies
-- ahead of the clock.
local function fw_at(p, key, v)
  local start = floor(clock / p.period) * p.period
  if not v then return start, start + p.period, 0, false end
  local s, count = match(v, '^(%d+) (%d+)$')
  if not count then corrupt(key) end
  s = tonumber(s)
  if clock < s + p.period then return s, s + p.period, tonumber(count), s > clock end
  -- (A window that began off the epoch's grid, under another period, is
  -- followed, not overlapped.)
  start = max(start, s + p.period)
  return start, start + p.period, 0, false
end

function fw.load(keys, k, vals, p)
  local start, wend, count, ahead = fw_at(p, keys[k], vals[k])
  return {key = keys[k], start = start, wend = wend, count = count, ahead = ahead, found = vals[k] ~= nil, dirty = false}
end

-- cw.load's state is the clock's window (st.i its index in p.b), or a
-- window ahead. A debt of a window that has ended, count above rate, is
-- carried into it: each window since has paid rate of it.
function cw.load(keys, k, vals, p)
  local i = cw_window(p, clock)
  local st = {key = keys[k], count = 0, i = i, start = p.b[i], wend = p.b[i + 1], ord = p.o[i]}
  local v = vals[k]
  if not v then return st end
  local start, wend, count, ord = match(v, '^(%d+) (%d+) (%d+) ?(%d*)$')
  if not count then corrupt(keys[k]) end
  wend, count, ord = tonumber(wend), tonumber(count), tonumber(ord)
  st.found = true
  if clock < wend then
    st.start, st.wend, st.count, st.i, st.ord = tonumber(start), wend, count, nil, ord
    for j = 1, 4 do
      if p.b[j] == st.start then
        st.i = j
        st.ord = p.o[j]
      end
    end
    st.ahead = st.start > clock
  elseif ord and count > p.rate then
    st.count = max(0, count - max(1, st.ord - ord) * p.rate)
  end
  return st
end

-- A debt beyond the window's rate carries into the following windows, rate
-- in each: the state moves to the window where the remainder falls.
function fw.carry(st, p)
  local k = min(ceil(st.count / p.rate) - 1, floor((2 ^ 52 - st.wend) / p.period))
  st.start, st.wend = st.start + k * p.period, st.wend + k * p.period
  st.count = st.count - k * p.rate
end

-- window_waits are retry_after for need units (0: none refused), reset_after
-- and the units remaining, of a window [start, wend) that counts count.
local function window_waits(p, start, wend, count, ahead, need)
  local retry, reset, remaining = 0, 0, 0
  if need > 0 then
    if ahead and count + need <= p.rate then retry = start - clock else retry = wend - clock end
  end
  if ahead then
    reset = start - clock
    if count > 0 then reset = wend - clock end
  else
    if count > 0 then reset = wend - clock end
    remaining = max(0, p.rate - count)
  end
  return retry, reset, remaining
end

function fw.waits(p, st, count, need)
  return window_waits(p, st.start, st.wend, count, st.ahead, need)
end

-- A calendar debt's waits: the m-th window after the state's counts
-- count - m * rate. They reach no further than the last window the client
-- named: a request then learns the rest.
function cw.waits(p, st, count, need)
  if count <= p.rate or st.ahead or not st.i then
    return window_waits(p, st.start, st.wend, count, st.ahead, need)
  end
  local retry, last = 0, min(4, st.i + ceil(count / p.rate))
  if need > 0 then retry = p.b[min(last, st.i + ceil((count + need - p.rate) / p.rate))] - clock end
  return retry, p.b[last] - clock, 0
end

-- window_decide decides for both: A is fw or cw.
local function window_decide(A, st, p, n, mode, stamp)
  local count, granted = st.count, 0
  if mode == REFUND then
    if not st.ahead and stamp >= st.start and stamp < st.wend then count = max(0, count - n) end
  elseif mode == CHARGE then
    count = count + n
  elseif mode == RENEW or st.ahead then
    -- (nothing to keep; a window ahead refuses)
  elseif count + n <= p.rate then
    granted = n
  elseif mode == ATMOST then
    granted = max(0, p.rate - count)
  end
  if granted > 0 and mode ~= PEEK then count = count + granted end
  if count ~= st.count then
    st.count, st.dirty = count, true
    if mode == CHARGE and count > p.rate and A.carry then
      A.carry(st, p)
      st.ahead = st.start > clock
      count = st.count
    end
  end
  local need = 0
  if granted == 0 and mode == ATMOST then need = 1 elseif granted == 0 and mode <= ATMOST then need = n end
  local retry, reset, remaining = A.waits(p, st, count, need)
  return granted, remaining, retry, reset, 0
end

function fw.decide(st, p, n, mode, stamp) return window_decide(fw, st, p, n, mode, stamp) end
function cw.decide(st, p, n, mode, stamp) return window_decide(cw, st, p, n, mode, stamp) end

local function fw_value(start, count)
  return fmt('%d %d', start, count)
end

local function fw_encode(st)
  return fw_value(st.start, st.count)
end

local function cw_encode(st)
  if not st.ord then return fmt('%d %d %d', st.start, st.wend, st.count) end
  return fmt('%d %d %d %d', st.start, st.wend, st.count, st.ord)
end

function fw.save(st, p, reset, nonpeek) persist(st, reset, nonpeek, fw_encode) end

-- fw_prefix is "<start> ", how a state counted in the window of p that
-- holds clock begins, and its start. The library keeps both in p until
-- the window ends (p is its parsed Limit, see limit), so the common take
-- reads its state with no pattern match and no conversion of the start.
local function fw_prefix(p)
  local start = floor(clock / p.period) * p.period
  if p.start ~= start then
    p.start = start
    p.prefix = fmt('%d ', start)
  end
  return p.prefix, start
end

-- take is one CONSUME of n, one's common call, with no table for the
-- state (see tb.take).
function fw.take(key, v, p, n)
  local prefix, start = fw_prefix(p)
  local wend, count, ahead = start + p.period, 0, false
  if v then
    -- A state of this window (the common case) as fw_at reads it; any
    -- other, fw_at reads.
    count = nil
    if sub(v, 1, #prefix) == prefix then count = tonumber(sub(v, #prefix + 1)) end
    if not count or count < 0 or count % 1 ~= 0 then
      start, wend, count, ahead = fw_at(p, key, v)
    end
  end
  local granted, need = 0, n
  if not ahead and count + n <= p.rate then
    granted, need = n, 0
    count = count + n
  end
  local retry, reset, remaining = window_waits(p, start, wend, count, ahead, need)
  if granted > 0 then
    if start == p.start then
      write(key, prefix .. fmt('%d', count), reset)
    else
      write(key, fw_value(start, count), reset)
    end
  elseif v then
    keep(key, reset)
  end
  return granted, remaining, retry, reset, 0
end
-- A debt that outlasts the windows the client named keeps its key 32 days
-- (more than any calendar window) for each window more, so that it is not
-- forgiven by its key expiring. Only a debt needs its window's ordinal:
-- any other state is written as a library without ordinals reads it (one
-- still running during a rolling deploy).
function cw.save(st, p, reset, nonpeek)
  if st.count <= p.rate then st.ord = nil end
  if st.i and st.count > p.rate then
    reset = min(2 ^ 52, reset + max(0, st.i + ceil(st.count / p.rate) - 4) * 2764800000000)
  end
  persist(st, reset, nonpeek, cw_encode)
end

algorithms[4] = fw
algorithms[7] = cw
