-- Concurrency: at most rate requests in flight per key, across every
-- client of the Redis. A request in flight holds a permit: a member of a
-- sorted set, scored by the instant it lapses, period after it was taken
-- or last renewed. Its holder gives it back when done (REFUND) and keeps
-- it beyond period with RENEW, which takes a lapsed permit again when
-- there is room and reports when there is none; a permit whose holder
-- died (a crashed process, a lost connection) lapses by itself, so a crash
-- never shrinks the limit for longer than period.
--
-- State    one sorted set: member a permit's id (chosen by the client,
--          unique), score the µs at which it lapses; or, for a permit
--          given back, minus the µs its tombstone lapses, a period after
--          the release. The key's TTL is that of its latest permit or
--          tombstone.
--
-- A tombstone makes a release win over a renewal sent before it (a
-- renewal Redis runs late, after a stall): RENEW never takes again a
-- permit its holder gave back, so no request that has ended holds one.
-- httplimit sends a renewal with a timeout of half a lease, so one that
-- reaches Redis runs within a period of the release.
-- Limit    params (see limit in the prelude): period µs (a permit's life without renewal), rate permits
--
-- Every request names its permit (the driver passes the id). Work per call
-- is O(log N) in the N permits: lapsed permits are counted out with ZCOUNT
-- and removed at most two per call, the oldest first, so the set never
-- holds more than the permits of the last period. A denial's retry_after is
-- a guess, since a permit is given back whenever its request ends: the time
-- until the oldest permit lapses, at most a second.
local cc = {nkeys = 1, nparams = 2, ids = true}

function cc.params(args, a)
  return {period = tonumber(args[a]), rate = tonumber(args[a + 1])}
end

function cc.load(keys, k, vals, p)
  local key = keys[k]
  -- (Lapsed permits, scored in [0, clock], and lapsed tombstones, in
  -- [-clock, 0), in one range.)
  local gone = call('ZRANGEBYSCORE', key, fmt('%d', -clock), fmt('%d', clock), 'LIMIT', 0, 3)
  if #gone > 0 then call('ZREM', key, unpack(gone)) end
  local st = {key = key, live = call('ZCOUNT', key, fmt('(%d', clock), '+inf'), last = 0, tomb = 0}
  if st.live > 0 then st.last = tonumber(call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) end
  return st
end

function cc.decide(st, p, n, mode, stamp, id)
  -- A request holds one permit whatever its cost: under layers, n is the
  -- cost the rate layers take.
  n = 1
  local granted = 0
  if mode == REFUND then
    local score = call('ZSCORE', st.key, id)
    if score and tonumber(score) > clock then st.live = st.live - 1 end
    st.tomb, st.dirty = clock + p.period, true
    call('ZADD', st.key, fmt('%d', -st.tomb), id)
  elseif mode == RENEW then
    -- A permit that lapsed (its renewal came late: Redis or the link was
    -- down) is taken again if there is room, as a fresh take would be;
    -- otherwise its holder learns that it holds none (granted 0), and
    -- nothing counts it.
    local score = call('ZSCORE', st.key, id)
    score = score and tonumber(score)
    local held = score and score > clock
    if score and score < 0 then
      -- given back: a renewal that comes after the release keeps nothing
    elseif held or st.live + 1 <= p.rate then
      call('ZADD', st.key, fmt('%d', clock + p.period), id)
      st.last, st.dirty = max(st.last, clock + p.period), true
      if not held then st.live = st.live + 1 end
      granted = 1
    end
  elseif mode == CHARGE then
    -- (a permit has no cost to charge)
  elseif st.live + n <= p.rate then
    granted = n
    if mode ~= PEEK then
      call('ZADD', st.key, fmt('%d', clock + p.period), id)
      st.live, st.last, st.dirty = st.live + n, clock + p.period, true
    end
  end
  local retry, reset = 0, 0
  if granted == 0 and mode <= ATMOST then
    local first = call('ZRANGEBYSCORE', st.key, fmt('(%d', clock), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    retry = 1000000
    if #first > 0 then retry = min(retry, tonumber(first[2]) - clock) end
  end
  if st.live > 0 then reset = st.last - clock end
  if mode == RENEW then return granted, max(0, p.rate - st.live), 0, reset, 0 end
  return granted, max(0, p.rate - st.live), retry, reset, 0
end

function cc.save(st, p, reset, nonpeek)
  if st.dirty then call('PEXPIRE', st.key, fmt('%d', max(1, ceil((max(st.last, st.tomb) - clock) / 1000)))) end
end

algorithms[6] = cc
