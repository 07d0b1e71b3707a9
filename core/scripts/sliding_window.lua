-- Sliding window log: at most rate units in any window of length period,
-- exactly. Each admitted request is one entry, weighted by its cost, so
-- memory grows with the requests in the window, never with their cost, and
-- every call does O(log N) work plus the entries it trims.
--
-- State    two keys. The log, a sorted set: one entry per admitted request,
--          scored by the units admitted through it (a running total, so
--          scores rise with time), member "<time µs> <total>" (unique: the
--          total grows with every entry). The meta, a string "<total>
--          <trimmed> <oldest> <newest> <floor> <end>": units ever admitted,
--          units that left the window (the total of the newest entry
--          trimmed), times µs of the oldest and newest entry in the log (0
--          when empty), the time the log was last written at, and the
--          keys' expiry in ms (see persist).
-- Limit    ARGV: period µs, rate units per window
--
-- The count in the window is total - trimmed. A request of n that does not
-- fit must wait until the entry whose running total reaches
-- total + n - rate has left the window: one ZRANGEBYSCORE finds it, so the
-- wait is exact whatever the mix of costs. The log's time never moves back:
-- a call works at the later of Redis TIME and the floor, so entries trimmed
-- once never come back into the window after a clock step back.
-- retry_after and reset_after are measured from Redis' clock, so after a
-- clock step back they include the step. Units cannot be refunded: taking
-- one entry's weight out would change the running total of every later one.
local sw = {nkeys = 2, nparams = 2}

function sw.params(a)
  return {period = tonumber(ARGV[a]), rate = tonumber(ARGV[a + 1])}
end

-- trim removes the entries that have left the window ending at st.now, the
-- oldest first, a page at a time.
local function sw_trim(st, horizon)
  while st.total > st.trimmed and st.oldest <= horizon do
    local page = redis.call('ZRANGE', st.log, 0, 63)
    if #page == 0 then
      -- The log is gone (evicted) while the meta is not: start afresh.
      st.trimmed, st.oldest = st.total, 0
      break
    end
    local gone = 0
    for i = 1, #page do
      local t, total = match(page[i], '^(%d+) (%d+)$')
      t = tonumber(t)
      if t > horizon then
        st.oldest = t
        break
      end
      st.trimmed = tonumber(total)
      gone = i
    end
    if gone == 0 then break end
    redis.call('ZREMRANGEBYRANK', st.log, 0, gone - 1)
    st.dirty = true
    if st.trimmed == st.total then st.oldest = 0 end
  end
end

function sw.load(k, vals, p)
  local st = {log = KEYS[k], key = KEYS[k + 1], now = clock, total = 0, trimmed = 0, oldest = 0, newest = 0, e = 0}
  local v = vals[k + 1]
  if not v then return st end
  local raw, total, trimmed, oldest, newest, floor_, e = match(v, '^((%d+) (%d+) (%d+) (%d+) (%d+)) (%d+)$')
  if not e then corrupt(KEYS[k + 1]) end
  st.total, st.trimmed, st.oldest, st.newest = tonumber(total), tonumber(trimmed), tonumber(oldest), tonumber(newest)
  st.e, st.raw = tonumber(e), raw
  floor_ = tonumber(floor_)
  if floor_ > clock then st.now = floor_ end
  sw_trim(st, st.now - p.period)
  -- A log trimmed empty has no time of its own left.
  if st.total == st.trimmed then st.now = clock end
  return st
end

function sw.decide(st, p, n, mode)
  if mode == REFUND then error('redlimit: the sliding window log cannot refund') end
  local count, granted = st.total - st.trimmed, 0
  if count + n <= p.rate then
    granted = n
  elseif mode == ATMOST then
    granted = p.rate - count
  end
  if granted > 0 and mode ~= PEEK then
    st.total = st.total + granted
    redis.call('ZADD', st.log, st.total, fmt('%d %d', st.now, st.total))
    if st.oldest == 0 then st.oldest = st.now end
    st.newest, st.dirty = st.now, true
    count = count + granted
  end
  local retry = 0
  if granted == 0 then
    if mode == ATMOST then n = 1 end
    -- The oldest count + n - rate units must leave the window first.
    local entry = redis.call('ZRANGEBYSCORE', st.log, st.total + n - p.rate, '+inf', 'LIMIT', 0, 1)[1]
    -- (No entry: the log was evicted under the meta; all of it has surely
    -- left by the time its newest entry has.)
    local t = st.newest
    if entry then t = tonumber(match(entry, '^(%d+)')) end
    retry = t + p.period - clock
  end
  local reset = 0
  if count > 0 then reset = st.newest + p.period - clock end
  return granted, max(0, p.rate - count), retry, reset, 0
end

local function sw_encode(st, e)
  return fmt('%d %d %d %d %d %d', st.total, st.trimmed, st.oldest, st.newest, st.now, e)
end

function sw.save(st, p, reset, nonpeek)
  if st.total == st.trimmed then
    -- Nothing is left in the window: the state is whole, and nothing
    -- needs keeping (the log deleted itself with its last entry).
    if st.dirty then redis.call('DEL', st.key) end
    return
  end
  local ttl = persist(st, reset, nonpeek, sw_encode)
  if ttl then redis.call('PEXPIRE', st.log, ttl) end
end

algorithms[2] = sw
