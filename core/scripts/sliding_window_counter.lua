-- Sliding window counter: approximates "at most rate units in any window of
-- length period" in O(1) memory. The estimate is the current fixed window's
-- count plus the previous window's count weighted by how much of it the
-- sliding window still overlaps. It assumes the previous window's requests
-- were spread evenly, so it can admit a little more or less than the exact
-- log around bursts.
--
-- KEYS[1]  hash {s = current window start µs, c = its count, p = previous
--          window's count}
-- ARGV[1]  period, µs
-- ARGV[2]  rate, units per window
-- ARGV[3]  n, units this request costs (1 <= n <= rate)
-- ARGV[4]  "1" to peek: decide, but count and write nothing
-- Reply    {allowed 0|1, remaining units, retry_after µs, reset_after µs, 0}
--
-- All comparisons are multiplied through by period, so they are exact
-- integer arithmetic (rate * period < 2^53 is checked by the client).
-- retry_after and reset_after are measured from Redis' clock, so after a
-- clock step back they include the step.
local key = KEYS[1]
local period = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local peek = ARGV[4] == '1'

-- floor(a / b) for non-negative integers, exact even where the double
-- quotient rounds up to the next integer.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = clock

local start = math.floor(now / period) * period
local count, prev = 0, 0
local state = redis.call('HMGET', key, 's', 'c', 'p')
if state[1] then
  local last = tonumber(state[1])
  if last > now then now = last end
  if now < last + period then
    start, count, prev = last, tonumber(state[2]), tonumber(state[3])
  elseif now < last + 2 * period then
    start, prev = last + period, tonumber(state[2])
  else
    start = math.floor(now / period) * period
  end
end

local elapsed = now - start
local weight = period - elapsed
local budget = rate * period
local allowed = prev * weight + (count + n) * period <= budget
if allowed and not peek then count = count + n end

local retry = 0
if not allowed then
  if count + n <= rate then
    -- Wait in this window until prev's weight has shrunk enough.
    retry = period - idiv((rate - count - n) * period, prev) - elapsed
  else
    -- Wait for the next window, where this window's count is prev.
    retry = period - elapsed + math.max(0, period - idiv((rate - n) * period, count))
  end
  retry = retry + now - clock
end

local reset = 0
if count > 0 then
  reset = 2 * period - elapsed + now - clock
elseif prev > 0 then
  reset = weight + now - clock
end
local remaining = math.max(0, idiv(math.max(0, budget - prev * weight - count * period), period))

if allowed and not peek then
  redis.call('HSET', key, 's', start, 'c', count, 'p', prev)
  redis.call('PEXPIRE', key, math.max(1, math.ceil((start + 2 * period - clock) / 1000)))
elseif not peek and reset > 0 and redis.call('PTTL', key) < math.ceil(reset / 1000) - 1 then
  -- A denial writes no state, but the Limit may have changed since the TTL
  -- was set (a longer period, a lower rate): keep the state as long as it
  -- matters now, or its expiry would hand out a fresh quota. (PTTL is
  -- rounded down to the ms: a TTL 1 ms short is rounding, not a change.)
  redis.call('PEXPIRE', key, math.ceil(reset / 1000))
end
return {allowed and 1 or 0, remaining, retry, reset, 0}
