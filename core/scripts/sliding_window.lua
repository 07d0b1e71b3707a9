-- Sliding window log: at most rate units in any window of length period.
-- Each admitted request is an entry in a sorted set scored by its time and
-- weighted by its cost, so memory grows with the requests in the window,
-- never with their cost. For rate <= CAP each request is an entry of its
-- own and the bound is exact. For rate > CAP a request joins the newest
-- entry when both fall in one CAP-th of the period (aligned slices), and
-- the entry then leaves with its last request: a unit leaves the window
-- up to period / CAP late. A log that holds more than CAP entries anyway
-- (refunded requests keep theirs) has every request join the newest
-- entry, later still. So the log never holds more than CAP + 1 entries,
-- every call's work is bounded, and every error is on the strict side.
--
-- State    two keys. The log, a sorted set: one entry per request (or group
--          of requests), scored by its time µs, member "<S> <w>": w its
--          units and S the running total of units through it (unique: it
--          grows with every entry). The meta, a string "<T> <trimmed>
--          <oldest> <newest> <nw> <m>[ <S> <r>...]": T the running
--          total, trimmed the running total before the oldest entry left,
--          the times µs of the oldest and newest entries (0 when empty),
--          the newest entry's w, the number of entries m; then at most 8
--          credits, each r units refunded from the entry holding unit
--          number S, which count no more until that entry leaves.
-- Limit    params (see limit in the prelude): period µs, rate units per window
--
-- The count in the window is T - trimmed - the credits. Entries leave in
-- time order, each taking its units and its credits with it, so the count
-- only falls as time passes: the wait for n units is found by a binary
-- search over the entries for the first whose leaving makes n fit, exact
-- whatever the mix of costs. Trimming is one ZREMRANGEBYSCORE. A log whose
-- newest entry lies ahead of Redis' clock refuses every request until the
-- clock reaches it: it holds a debt (CHARGE) carried into later windows, or
-- Redis' clock stepped back. retry_after and reset_after are measured from
-- Redis' clock.
local sw = {nkeys = 2, nparams = 2}
local SW_CAP = 1024
local SW_CREDITS = 8
local SW_REBASE = 2 ^ 50

function sw.params(args, a)
  local period = tonumber(args[a])
  return {period = period, rate = tonumber(args[a + 1]), q = ceil(period / SW_CAP)}
end

-- sw_entry parses a log entry: its S and w.
local function sw_entry(member)
  local s, w = match(member, '^(%d+) (%d+)$')
  return tonumber(s), tonumber(w)
end

-- sw_credit sums the credits that still count (their entry is in the log).
local function sw_credit(st)
  local kept, sum = {}, 0
  for i = 1, #st.cr, 2 do
    if st.cr[i] > st.trimmed then
      kept[#kept + 1] = st.cr[i]
      kept[#kept + 1] = st.cr[i + 1]
      sum = sum + st.cr[i + 1]
    end
  end
  st.cr, st.credit = kept, sum
end

-- sw_trim removes the entries that have left the window ending at clock.
local function sw_trim(st, horizon)
  if st.m == 0 or st.oldest > horizon then return end
  st.m = st.m - call('ZREMRANGEBYSCORE', st.log, '-inf', fmt('%d', horizon))
  local first = {}
  if st.m > 0 then first = call('ZRANGE', st.log, 0, 0, 'WITHSCORES') end
  if #first == 0 then
    -- Everything left (or the log was evicted under its meta): empty.
    st.m, st.trimmed, st.oldest, st.newest, st.nw = 0, st.T, 0, 0, 0
  else
    local s, w = sw_entry(first[1])
    st.trimmed, st.oldest = s - w, tonumber(first[2])
  end
  st.dirty = true
  sw_credit(st)
end

function sw.load(keys, k, vals, p)
  local st = {log = keys[k], key = keys[k + 1], T = 0, trimmed = 0, oldest = 0, newest = 0, nw = 0, m = 0,
    cr = {}, credit = 0}
  local v = vals[k + 1]
  if not v then return st end
  local T, trimmed, oldest, newest, nw, m, rest = match(v, '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+)(.*)$')
  if not m then corrupt(keys[k + 1]) end
  st.T, st.trimmed, st.oldest, st.newest = tonumber(T), tonumber(trimmed), tonumber(oldest), tonumber(newest)
  st.nw, st.m, st.found = tonumber(nw), tonumber(m), true
  if rest ~= '' then
    for s, r in gmatch(rest, '(%d+) (%d+)') do
      st.cr[#st.cr + 1] = tonumber(s)
      st.cr[#st.cr + 1] = tonumber(r)
    end
    sw_credit(st)
  end
  st.ahead = st.newest > clock
  sw_trim(st, clock - p.period)
  return st
end

-- sw_add admits w units at t (never before the newest entry).
local function sw_add(st, p, t, w)
  if st.m > 0 and (st.newest == t or st.m > SW_CAP or p.rate > SW_CAP and floor(st.newest / p.q) == floor(t / p.q)) then
    call('ZREM', st.log, fmt('%d %d', st.T, st.nw))
    st.nw = st.nw + w
  else
    st.nw, st.m = w, st.m + 1
  end
  st.T = st.T + w
  call('ZADD', st.log, fmt('%d', t), fmt('%d %d', st.T, st.nw))
  st.newest, st.dirty = t, true
  if st.m == 1 then st.oldest = t end
end

-- sw_refund credits n units taken at stamp. Their entry is the first at or
-- after stamp (later requests only ever join the newest entry), unless
-- stamp has left the window: then they have left, or joined an entry that
-- stays for later units, and the refund is dropped (strict side).
local function sw_refund(st, p, n, stamp)
  if st.m == 0 or stamp <= clock - p.period then return end
  local member = call('ZRANGEBYSCORE', st.log, fmt('%d', stamp), '+inf', 'LIMIT', 0, 1)[1]
  if not member then return end
  local s, w = sw_entry(member)
  local cr, at, have = st.cr, 0, 0
  for i = 1, #cr, 2 do
    if cr[i] == s then at, have = i, cr[i + 1] end
  end
  local r = min(n, w - have)
  if r <= 0 then return end
  if at == 0 then
    at = #cr + 1
    cr[at], cr[at + 1] = s, 0
  end
  cr[at + 1] = cr[at + 1] + r
  if #cr > 2 * SW_CREDITS then
    -- Too many: fold the credit of the oldest entry into the next, which
    -- then ends with the older entry, too early rather than too late.
    local lo, lo2
    for i = 1, #cr, 2 do
      if not lo or cr[i] < cr[lo] then
        lo2, lo = lo, i
      elseif not lo2 or cr[i] < cr[lo2] then
        lo2 = i
      end
    end
    cr[lo + 1] = cr[lo + 1] + cr[lo2 + 1]
    table.remove(cr, lo2 + 1)
    table.remove(cr, lo2)
  end
  st.dirty = true
  sw_credit(st)
end

-- sw_charge takes n units now, beyond what is left if need be. A debt
-- beyond what one window holds carries into the following windows, rate in
-- each: the log refuses everything until the last of them begins, and the
-- remainder is an entry there.
local function sw_charge(st, p, n)
  local total = st.T - st.trimmed - st.credit + n
  local t0 = max(clock, st.newest)
  if total <= p.rate then
    sw_add(st, p, t0, n)
    return
  end
  local k = min(ceil(total / p.rate) - 1, floor((2 ^ 52 - t0) / p.period) - 1)
  sw_add(st, p, t0 + k * p.period, total - k * p.rate)
  st.ahead = st.newest > clock
end

-- sw_wait is how long, from clock, until need units fit: until enough of
-- the oldest entries have left (and the log is no longer ahead).
local function sw_wait(st, p, need)
  local t0 = clock
  if st.ahead then t0 = st.newest end
  if st.T - st.trimmed - st.credit + need <= p.rate then return t0 - clock end
  -- The first entry i (by rank) such that, once entries 0..i have left,
  -- need fits; every entry left makes it fit, so the last one always does.
  local lo, hi, at = 0, st.m - 1, nil
  while lo <= hi do
    local mid = floor((lo + hi) / 2)
    local e = call('ZRANGE', st.log, mid, mid, 'WITHSCORES')
    if #e == 0 then break end
    local s = sw_entry(e[1])
    local left = st.T - s
    for i = 1, #st.cr, 2 do
      if st.cr[i] > s then left = left - st.cr[i + 1] end
    end
    if left + need <= p.rate then
      at, hi = tonumber(e[2]), mid - 1
    else
      lo = mid + 1
    end
  end
  -- (No entry at all: the log was evicted under its meta; all of it has
  -- surely left by the time its newest entry has.)
  return max(t0, (at or st.newest) + p.period) - clock
end

function sw.decide(st, p, n, mode, stamp)
  local granted = 0
  local count = st.T - st.trimmed - st.credit
  if mode == REFUND then
    sw_refund(st, p, n, stamp)
  elseif mode == CHARGE then
    sw_charge(st, p, n)
  elseif mode == RENEW or st.ahead then
    -- (nothing to keep; a log ahead refuses)
  elseif count + n <= p.rate then
    granted = n
  elseif mode == ATMOST then
    granted = max(0, p.rate - count)
  end
  if granted > 0 and mode ~= PEEK then sw_add(st, p, clock, granted) end
  count = st.T - st.trimmed - st.credit
  if count <= 0 and st.m > 0 then
    -- Refunds left nothing that counts: the log is as good as empty, and
    -- is emptied, so that what comes next starts it afresh.
    call('DEL', st.log)
    st.T, st.trimmed, st.oldest, st.newest, st.nw, st.m, st.credit = 0, 0, 0, 0, 0, 0, 0
    st.cr, st.ahead, st.dirty = {}, false, true
  end
  local retry, reset, remaining = 0, 0, 0
  if granted == 0 and mode <= ATMOST then
    local need = n
    if mode == ATMOST then need = 1 end
    retry = sw_wait(st, p, need)
  end
  if count > 0 then
    -- Whole once nothing counts: when the newest entry leaves, unless
    -- credits free it all sooner.
    reset = st.newest + p.period - clock
    if #st.cr > 0 then reset = sw_wait(st, p, p.rate) end
  end
  if not st.ahead then remaining = max(0, p.rate - count) end
  return granted, remaining, retry, reset, 0
end

-- sw_rebase renumbers the entries from the oldest, so that running totals
-- stay far below 2^53 on a key that never rests: at most CAP + 1 entries,
-- once every 2^50 units.
local function sw_rebase(st)
  local base = st.trimmed
  local all = call('ZRANGE', st.log, 0, -1, 'WITHSCORES')
  local args = {}
  for i = 1, #all, 2 do
    local s, w = sw_entry(all[i])
    args[#args + 1] = all[i + 1]
    args[#args + 1] = fmt('%d %d', s - base, w)
  end
  call('DEL', st.log)
  if #args > 0 then call('ZADD', st.log, unpack(args)) end
  st.T, st.trimmed = st.T - base, 0
  for i = 1, #st.cr, 2 do st.cr[i] = st.cr[i] - base end
end

local function sw_encode(st)
  local head = fmt('%d %d %d %d %d %d', st.T, st.trimmed, st.oldest, st.newest, st.nw, st.m)
  if #st.cr == 0 then return head end
  local parts = {head}
  for i = 1, #st.cr do parts[#parts + 1] = fmt('%d', st.cr[i]) end
  return table.concat(parts, ' ')
end

function sw.save(st, p, reset, nonpeek)
  if st.T - st.trimmed - st.credit <= 0 then
    -- Nothing counts, now or later: the state is whole, and nothing needs
    -- keeping.
    if st.dirty then call('DEL', st.log, st.key) end
    return
  end
  if st.T > SW_REBASE then
    sw_rebase(st)
    st.dirty = true
  end
  local ttl = persist(st, reset, nonpeek, sw_encode)
  if ttl then call('PEXPIRE', st.log, fmt('%d', ttl)) end
end

algorithms[2] = sw
