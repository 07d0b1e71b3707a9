-- Sliding window log: at most rate units in any window of length period,
-- exactly. Each admitted unit is one sorted-set member scored by its
-- admission time, so memory is O(rate) per key; SlidingWindowCounter is the
-- O(1) alternative.
--
-- KEYS[1]  sorted set, score = admission time µs, member = "<time>.<i>"
--          for the i-th unit admitted at that time
-- ARGV[1]  period, µs
-- ARGV[2]  rate, units per window
-- ARGV[3]  n, units this request costs (1 <= n <= rate)
-- ARGV[4]  "1" to peek: decide, but add, trim and write nothing
-- Reply    {allowed 0|1, remaining units, retry_after µs, reset_after µs, 0}
--
-- Fixes from seed 002: Redis TIME instead of the client's clock; members are
-- unique by construction (units admitted at one microsecond are numbered
-- after those already there, so no ZADD overwrites an earlier permit); no
-- struct library; expired members are trimmed in one ZREMRANGEBYSCORE; the
-- key always has a TTL; the wait is for the n this request needs, not for
-- the nearest record.
-- Time never moves back: a request is scored at the later of Redis TIME and
-- the newest member (but never pushed past it, so requests in one
-- microsecond keep their true time). retry_after and reset_after are
-- measured from Redis' clock, so after a clock step back they include it.
local key = KEYS[1]
local period = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local peek = ARGV[4] == '1'

local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = clock

local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local last = nil
if newest[2] then
  last = tonumber(newest[2])
  if last > now then now = last end
end
local count = redis.call('ZCOUNT', key, now - period + 1, '+inf')

local allowed = count + n <= rate
local retry = 0
if not allowed then
  -- The oldest count - (rate - n) units must leave the window first.
  local k = count - (rate - n)
  local oldest = redis.call('ZRANGEBYSCORE', key, now - period + 1, '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
  retry = tonumber(oldest[2]) + period - clock
end

if allowed and not peek then
  -- Trim only when admitting, at the time this request is recorded at: a
  -- denied request leaves no trace, so it cannot move the log forward in
  -- time either (a later clock step back would forget live members).
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
  -- Units already admitted at this microsecond are numbered 1..seq.
  local seq = 0
  if last == now then seq = redis.call('ZCOUNT', key, now, now) end
  count = count + n
  last = now
  local members = {}
  for i = 1, n do
    members[#members + 1] = now
    members[#members + 1] = string.format('%.0f.%d', now, seq + i)
    if #members >= 2000 or i == n then
      redis.call('ZADD', key, unpack(members))
      members = {}
    end
  end
  redis.call('PEXPIRE', key, math.max(1, math.ceil((now + period - clock) / 1000)))
end

local reset = 0
if last and count > 0 then reset = last + period - clock end
if not allowed and not peek and reset > 0 and redis.call('PTTL', key) < math.ceil(reset / 1000) - 1 then
  -- A denial writes no state, but the Limit may have changed since the TTL
  -- was set (a longer period): keep the log as long as it matters now, or
  -- its expiry would hand out a fresh quota. (PTTL is rounded down to the
  -- ms: a TTL 1 ms short is rounding, not a change.)
  redis.call('PEXPIRE', key, math.ceil(reset / 1000))
end
return {allowed and 1 or 0, math.max(0, rate - count), retry, reset, 0}
