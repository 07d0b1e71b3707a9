-- Sliding window log: at most rate units in any window of length period,
-- exactly. Each admitted unit is one sorted-set member scored by its
-- admission time, so memory is O(rate) per key; SlidingWindowCounter is the
-- O(1) alternative.
--
-- KEYS[1]  sorted set, score = admission time µs, member = "<time>" or
--          "<time>.<i>" for the i-th unit of one request
-- ARGV[1]  period, µs
-- ARGV[2]  rate, units per window
-- ARGV[3]  n, units this request costs (1 <= n <= rate)
-- ARGV[4]  "1" to peek: decide, but add and write nothing
-- Reply    {allowed 0|1, remaining units, retry_after µs, reset_after µs, 0}
--
-- Fixes from seed 002: Redis TIME instead of the client's clock; members are
-- unique by construction (each request's time is after the newest member's,
-- so no ZADD overwrites an earlier permit); no struct library; expired
-- members are trimmed in one ZREMRANGEBYSCORE; the key always has a TTL;
-- the wait is for the n this request needs, not for the nearest record.
local key = KEYS[1]
local period = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local peek = ARGV[4] == '1'

local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = clock

local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if newest[2] then
  -- Strictly after the newest member: unique members, and never back in time.
  now = math.max(now, tonumber(newest[2]) + 1)
end
if not peek then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
end
local count = redis.call('ZCOUNT', key, now - period + 1, '+inf')

local allowed = count + n <= rate
local retry = 0
if not allowed then
  -- The oldest count - (rate - n) units must leave the window first.
  local k = count - (rate - n)
  local oldest = redis.call('ZRANGEBYSCORE', key, now - period + 1, '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
  retry = tonumber(oldest[2]) + period - now
end

local last = nil
if newest[2] then last = tonumber(newest[2]) end
if allowed and not peek then
  count = count + n
  last = now
  local members = {}
  for i = 1, n do
    members[#members + 1] = now
    members[#members + 1] = i == 1 and string.format('%.0f', now) or string.format('%.0f.%d', now, i)
    if #members >= 2000 or i == n then
      redis.call('ZADD', key, unpack(members))
      members = {}
    end
  end
  redis.call('PEXPIRE', key, math.max(1, math.ceil((now + period - clock) / 1000)))
end

local reset = 0
if last and count > 0 then reset = math.max(0, last + period - now) end
return {allowed and 1 or 0, math.max(0, rate - count), retry, reset, 0}
