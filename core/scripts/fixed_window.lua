-- Fixed window: at most rate units per window of length period. Windows are
-- aligned to the Unix epoch, so every instance agrees on where one starts.
--
-- KEYS[1]  hash {s = window start µs, c = units admitted in it}
-- ARGV[1]  period, µs
-- ARGV[2]  rate, units per window
-- ARGV[3]  n, units this request costs (1 <= n <= rate)
-- ARGV[4]  "1" to peek: decide, but count and write nothing
-- Reply    {allowed 0|1, remaining units, retry_after µs, reset_after µs, 0}
--
-- The counter lives in one hash with the window start, not in a key per
-- window, so a clock step back keeps counting in the later window and a
-- longer period extends the current window instead of opening a fresh one.
-- retry_after and reset_after are measured from Redis' clock, so after a
-- clock step back they include the step.
local key = KEYS[1]
local period = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local peek = ARGV[4] == '1'

local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = clock

local start = math.floor(now / period) * period
local count = 0
local state = redis.call('HMGET', key, 's', 'c')
if state[1] then
  local last = tonumber(state[1])
  if last > now then now = last end
  if now < last + period then
    start = last
    count = tonumber(state[2])
  else
    start = math.max(math.floor(now / period) * period, last + period)
  end
end

local allowed = count + n <= rate
if allowed and not peek then count = count + n end

local window_end = start + period - clock
local retry = 0
if not allowed then retry = window_end end
local reset = 0
if count > 0 then reset = window_end end

if allowed and not peek then
  redis.call('HSET', key, 's', start, 'c', count)
  redis.call('PEXPIRE', key, math.max(1, math.ceil((start + period - clock) / 1000)))
elseif not peek and reset > 0 and redis.call('PTTL', key) < math.ceil(reset / 1000) - 1 then
  -- A denial writes no state, but the Limit may have changed since the TTL
  -- was set (a longer period, a lower rate): keep the state as long as it
  -- matters now, or its expiry would hand out a fresh quota. (PTTL is
  -- rounded down to the ms: a TTL 1 ms short is rounding, not a change.)
  redis.call('PEXPIRE', key, math.ceil(reset / 1000))
end
return {allowed and 1 or 0, math.max(0, rate - count), retry, reset, 0}
