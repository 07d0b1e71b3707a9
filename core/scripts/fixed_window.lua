-- Fixed window: at most rate units per window. Windows over a period are
-- aligned to the Unix epoch on Redis' clock (multiples of period, a whole
-- number of ms), so every instance agrees on where one starts; or, for a
-- calendar Limit, they are the calendar days, weeks or months whose starts
-- the client computes in its time zone and sends.
--
-- Period windows (fw) keep the window's end in the expiry of one integer
-- key, so that a take inside a window is INCRBY and PTTL, as cheap as a
-- window that starts at a key's first request, and reads no clock:
--
-- State    v = tag * 2^36 + count, expiring when the window ends
--   count  the units counted in the window (above rate after the Limit was
--          lowered), plus AHEAD (2^35) while the window lies ahead of the
--          clock: it holds the rest of a debt (CHARGE) carried into it,
--          and refuses every request until its window comes
--   tag    1 + the window's index (its start / period) modulo 131071, never
--          0: the receipt of a take, so that a REFUND counts its units out
--          only in the window they were taken in. A key a take finds
--          holding just the n it added (INCRBY created it) is a window
--          that starts: a lone take reads TIME only then, to align its
--          end (a batch of several keys reads it once for all; the rare
--          paths read it too).
-- Limit    params (see limit in the prelude): period µs (a whole number of
--          ms), rate units per window (at most 2^33, so that count plus
--          a take never reaches AHEAD nor the tag), stagger 0 or 1: each
--          key's windows start a whole ms of a hash of its key (SHA1's
--          first 48 bits, modulo the period) after the epoch's multiples
--
-- A window lasts until its key expires, whatever the Limit becomes or
-- Redis' clock does: a longer or shorter period starts with the next
-- window, and a clock that steps back does not end a window early. Waits
-- are measured from the key's expiry (ms), or from Redis' clock where a
-- window starts.
--
-- Calendar windows (cw) keep a string "<start> <wend> <count>[ <ordinal>]":
-- the window's start and end µs, the units admitted in it, and, for a debt
-- (count above rate), the window's ordinal. Their Limit: rate, then
-- b1 < b2 < b3 < b4, the starts (µs) of four consecutive windows, the
-- client's current one second, then o1 < o2 < o3 < o4, their ordinals (the
-- days, ISO weeks or months since 1970 of the dates that name them). A
-- state whose window lies ahead of Redis' clock refuses every request until
-- the clock reaches it (Redis' clock stepped back). A calendar debt stays
-- in its window, and the windows after it pay it, rate in each, counted by
-- their ordinals (see cw.load): the client names only four windows, and a
-- debt may outlast them. A REFUND counts its units out only if they were
-- taken in the state's window.
local fw = {nkeys = 1, nparams = 3, own = true}
local cw = {nkeys = 1, nparams = 9}

local FW_M, FW_AHEAD, FW_TAGS, FW_MAX = 68719476736, 34359738368, 131071, 2 ^ 53 -- 2^36, 2^35, 2^17 - 1

function fw.params(args, a)
  local period = tonumber(args[a])
  local p = {period = period, period_ms = period / 1000, rate = tonumber(args[a + 1]), stagger = args[a + 2] == '1'}
  -- (Staggered windows end at instants of their own: no loop of takes.)
  if not p.stagger then p.takes = fw.takes end
  return p
end

function cw.params(args, a)
  return {rate = tonumber(args[a]),
    b = {tonumber(args[a + 1]), tonumber(args[a + 2]), tonumber(args[a + 3]), tonumber(args[a + 4])},
    o = {tonumber(args[a + 5]), tonumber(args[a + 6]), tonumber(args[a + 7]), tonumber(args[a + 8])}}
end

-- packed is a take (d its window's tag) in two integers, when its waits
-- are one: the tag times 2^36 plus the units remaining, negated when
-- refused, and the wait; the peers' reply. (Its magnitude, 2^36 or more,
-- is no granted count's, which is at most 2^33: the client tells the
-- forms apart.) nil when the take waits for two instants.
function fw.packed(r, rt, rs, d)
  if rt == 0 then return d * FW_M + r, rs end
  if rt == rs then return -(d * FW_M + r), rt end
end

-- fw_offset is where the windows of key start within a period (µs): at
-- the epoch's multiples, or, staggered, a whole ms of a hash of the key.
local function fw_offset(p, key)
  if not p.stagger then return 0 end
  return tonumber(sub(redis.sha1hex(key), 1, 12), 16) % p.period_ms * 1000
end

-- fw_tag is the tag of the window of p that holds t (µs), its windows
-- starting off µs after the epoch's multiples.
local function fw_tag(p, t, off)
  return floor((t - off) / p.period) % FW_TAGS + 1
end

-- fw_open sets st to the window of p that holds Redis' clock, from its
-- start: at its end (Unix ms), left µs until its key is gone, and its tag.
-- (Redis keeps a key through the ms its expiry names: every wait measured
-- from an expiry is 1 ms longer, so that it is never short.)
local function fw_open(st, p)
  if clock == 0 then now() end
  local off = fw_offset(p, st.key)
  local wend = (floor((clock - off) / p.period) + 1) * p.period + off
  st.left, st.at, st.tag = wend - clock + 1000, wend / 1000, fw_tag(p, clock, off)
end

-- clock_after reports whether Redis' clock has reached t (µs).
local function clock_after(t)
  if clock == 0 then now() end
  return clock >= t
end

-- fw_end is the end (µs) of the window of state st: the one with st's
-- tag among those its TTL, which is whole ms, may end.
local function fw_end(st, p)
  if st.at then return st.at * 1000 end
  if clock == 0 then now() end
  local off = fw_offset(p, st.key)
  local i = floor((clock + st.left - off) / p.period)
  for e = i - 2, i + 1 do
    if (e - 1) % FW_TAGS + 1 == st.tag then return e * p.period + off end
  end
  return i * p.period + off
end

-- fw.load reads its state itself (own): GET and PTTL, and TIME only where
-- a window starts.
function fw.load(keys, k, _, p)
  local key = keys[k]
  local st = {key = key, count = 0, ahead = false, found = false, dirty = false}
  -- (pcall: a key of another type is named, as a value that is not ours.)
  local v = pcall_('GET', key)
  if type_(v) == 'table' then corrupt(key) end
  if v then
    local ttl = call('PTTL', key)
    v = tonumber(v)
    if not v or v < FW_M or v >= FW_MAX or v % 1 ~= 0 then corrupt(key) end
    local c = v % FW_M
    st.found, st.tag, st.left = true, (v - c) / FW_M, (ttl + 1) * 1000
    if ttl < 0 then
      -- No expiry (PERSIST, a restore without TTLs): the count stands if
      -- it is the clock's window's, which gives it its end again; any other
      -- state is taken as expired now. Either way the key heals.
      fw_open(st, p)
      if c < FW_AHEAD and (v - c) / FW_M == st.tag then st.count = c end
      st.dirty = true
      return st
    end
    if c >= FW_AHEAD then
      -- A window ahead: on Redis' clock, exactly (its TTL is whole ms).
      c = c - FW_AHEAD
      local wend = fw_end(st, p)
      st.left = wend - clock + 1000
      -- The debt's window has come: it counts from here.
      if clock < wend - p.period then st.ahead = true else st.dirty = true end
    elseif ttl == 0 and clock_after(fw_end(st, p)) then
      -- The ms its expiry names, which a Redis keeps the key through
      -- (miniredis not): on Redis' clock, the next window has begun (and
      -- a call of several layers, whose stamp is the clock, names it).
      -- Before that, the key's expiry is its window's end, whatever the
      -- Period has become since (fw_end reckons with today's).
      c = 0
      fw_open(st, p)
    end
    st.count = c
    return st
  end
  fw_open(st, p)
  return st
end

-- A debt beyond the window's rate carries into the following windows,
-- rate in each: the state moves to the window where the remainder falls,
-- no further than 2^52 µs from now. Its end is set from the clock (PXAT),
-- so that it moves by whole periods exactly.
local function fw_carry(st, p)
  local k = min(ceil(st.count / p.rate) - 1, floor((2 ^ 52 - st.left) / p.period))
  if k < 1 then
    -- (Already as far as it goes: the rest is forgiven, 142 years on.)
    st.count = min(st.count, p.rate)
    return
  end
  local wend = fw_end(st, p) + k * p.period
  -- (Clipped there, the rest of the debt is forgiven: 142 years on.)
  st.count, st.ahead = min(st.count - k * p.rate, p.rate), true
  st.at, st.left = wend / 1000, wend - clock + 1000
  st.tag = (st.tag - 1 + k) % FW_TAGS + 1
end

-- window_waits are retry_after for need units (0: none refused), reset_after
-- and the units remaining, of a window that starts in start µs (< 0: it
-- has started) and ends in wend µs, and counts count.
local function window_waits(p, start, wend, count, ahead, need)
  local retry, reset, remaining = 0, 0, 0
  if need > 0 then
    if ahead and count + need <= p.rate then retry = start else retry = wend end
  end
  if ahead then
    reset = start
    if count > 0 then reset = wend end
  else
    if count > 0 then reset = wend end
    remaining = max(0, p.rate - count)
  end
  return retry, reset, remaining
end

-- window_grant is what a window that counts count grants a request of n
-- units in mode (a window ahead refuses; a REFUND counts out if
-- refundable), and its count after.
local function window_grant(count, p, n, mode, ahead, refundable)
  local granted = 0
  if mode == REFUND then
    if refundable then count = max(0, count - n) end
  elseif mode == CHARGE then
    count = count + n
  elseif mode == RENEW or ahead then
    -- (nothing to keep)
  elseif count + n <= p.rate then
    granted = n
  elseif mode == ATMOST then
    granted = max(0, p.rate - count)
  end
  if granted > 0 and mode ~= PEEK then count = count + granted end
  return granted, count
end

-- need is the units a request that took granted of n was refused (0: none).
local function refused(granted, n, mode)
  if granted > 0 or mode > ATMOST then return 0 end
  if mode == ATMOST then return 1 end
  return n
end

-- fw.decide returns, after granted, remaining and the waits, the window's
-- tag: the receipt a REFUND names.
function fw.decide(st, p, n, mode, stamp)
  -- (A stamp beyond the tags is the clock of a call of several layers.)
  if mode == REFUND and stamp > FW_TAGS then stamp = fw_tag(p, stamp, fw_offset(p, st.key)) end
  local refundable = st.found and not st.ahead and stamp == st.tag
  if refundable and mode == REFUND then
    -- The state may be another Period's (the Limit changed since the
    -- take), its tag the receipt's by a wrap: the take's window must also
    -- be the clock's under the receipt's own Period.
    if clock == 0 then now() end
    refundable = stamp == fw_tag(p, clock, fw_offset(p, st.key))
  end
  local granted, count = window_grant(st.count, p, n, mode, st.ahead, refundable)
  if count ~= st.count or st.dirty then
    st.count, st.dirty = count, true
    if mode == CHARGE and count > p.rate then fw_carry(st, p) end
  end
  local retry, reset, remaining = window_waits(p, st.left - p.period, st.left, st.count, st.ahead, refused(granted, n, mode))
  return granted, remaining, retry, reset, st.tag
end

-- fw.save writes a changed state, never for a PEEK (which leaves a state
-- to mend as it is, for the next take): its expiry where the window is new
-- or moved (at), else the one it has. An empty window is no state.
function fw.save(st, p, reset, nonpeek)
  if not st.dirty or not nonpeek then return end
  if st.count == 0 and not st.ahead then
    if st.found then call('DEL', st.key) end
    return
  end
  local v = st.tag * FW_M + st.count
  if st.ahead then v = v + FW_AHEAD end
  v = fmt('%d', v)
  if st.at then
    call('SET', st.key, v, 'PXAT', fmt('%d', st.at))
  else
    call('SET', st.key, v, 'KEEPTTL')
  end
end

-- take is one CONSUME of n, one's common call and a batch's key of one:
-- INCRBY, then PTTL, and nothing else inside a window that has room; in a
-- batch of several keys, which reads the clock once, INCRBY alone (took:
-- its reply, when takes has made it). A window that starts sets the key's
-- value and expiry. Whatever else it finds (a window ahead, a window's
-- last ms, a value not ours) takes the INCRBY back and is decided as load,
-- decide and save decide it.
function fw.take(key, _, p, n, took)
  local ns = n == 1 and '1' or fmt('%d', n)
  -- (A value that is not an integer fails here, with Redis' error; the
  -- client names the key.)
  local v = took or call('INCRBY', key, ns)
  if v >= FW_M and v < FW_MAX then
    local count = v % FW_M
    local tag, wait = (v - count) / FW_M, nil
    if clock == 0 or p.stagger then
      local ttl = call('PTTL', key)
      -- (In its last ms, ttl 0, a window may have ended on Redis' clock.)
      if ttl > 0 then wait = (ttl + 1) * 1000 end
    else
      -- A call that read the clock (a batch of several keys): a state of
      -- the clock's window ends with it, as every key's under p does.
      local i = floor(clock / p.period)
      if tag == i % FW_TAGS + 1 then wait = (i + 1) * p.period - clock + 1000 end
    end
    if wait and count - n < FW_AHEAD then
      if count <= p.rate then return n, p.rate - count, 0, wait, tag end
      -- The window is full: the take is taken back.
      call('DECRBY', key, ns)
      count = count - n
      local reset = 0
      if count > 0 then reset = wait end
      return 0, max(0, p.rate - count), wait, reset, tag
    end
    call('DECRBY', key, ns)
  elseif v == n and n <= p.rate then
    -- A window starts: its tag is added, and its end set (as fw_open).
    if clock == 0 then now() end
    local off = fw_offset(p, key)
    local i = floor((clock - off) / p.period)
    local tag, wend = i % FW_TAGS + 1, (i + 1) * p.period + off
    call('INCRBY', key, fmt('%d', tag * FW_M))
    call('PEXPIREAT', key, fmt('%d', wend / 1000))
    return n, p.rate - n, 0, wend - clock + 1000, tag
  elseif v == n then
    call('DEL', key)
  else
    call('DECRBY', key, ns)
  end
  local st = fw.load({key}, 1, nil, p)
  local g, r, rt, rs, d = fw.decide(st, p, n, CONSUME, 0)
  fw.save(st, p, rs, true)
  return g, r, rt, rs, d
end

-- takes decides, from keys[k] and args[a] on, a batch's keys that each
-- have one request, a take of one unit (code 8, the common request), on
-- windows that are not staggered (p.takes), and writes their replies into
-- out from o + 1, packed. The batch read the clock: every such key's
-- window in progress is the clock's, so its tag and wait are the same for
-- all, and a key is INCRBY and nothing else. It returns k, a and o past
-- the keys it decided, and, where it stopped at a key it found otherwise
-- (a window that starts, one full, one of another tag, a value not ours),
-- that key's INCRBY reply, for take to decide it.
function fw.takes(keys, args, k, a, out, o, p)
  local i = floor(clock / p.period)
  local base = (i % FW_TAGS + 1) * FW_M
  local top, wait, nkeys = base + p.rate, (i + 1) * p.period - clock + 1000, #keys
  while k <= nkeys and args[a] == '8' do
    local v = call('INCRBY', keys[k], '1')
    if v <= base or v > top then return k, a, o, v end
    -- (The tag times 2^36 plus the units remaining: base + rate - count.)
    out[o + 1], out[o + 2] = base + (top - v), wait
    o, k, a = o + 2, k + 1, a + 1
  end
  return k, a, o
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

-- A calendar debt's waits: the m-th window after the state's counts
-- count - m * rate. They reach no further than the last window the client
-- named: a request then learns the rest.
function cw.waits(p, st, count, need)
  if count <= p.rate or st.ahead or not st.i then
    return window_waits(p, st.start - clock, st.wend - clock, count, st.ahead, need)
  end
  local retry, last = 0, min(4, st.i + ceil(count / p.rate))
  if need > 0 then retry = p.b[min(last, st.i + ceil((count + need - p.rate) / p.rate))] - clock end
  return retry, p.b[last] - clock, 0
end

-- cw.decide decides as fw.decide, for a state whose window is [st.start,
-- st.wend) on Redis' clock.
function cw.decide(st, p, n, mode, stamp)
  local granted, count = window_grant(st.count, p, n, mode, st.ahead, not st.ahead and stamp >= st.start and stamp < st.wend)
  if count ~= st.count then st.count, st.dirty = count, true end
  local retry, reset, remaining = cw.waits(p, st, count, refused(granted, n, mode))
  return granted, remaining, retry, reset, 0
end

local function cw_encode(st)
  if not st.ord then return fmt('%d %d %d', st.start, st.wend, st.count) end
  return fmt('%d %d %d %d', st.start, st.wend, st.count, st.ord)
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
