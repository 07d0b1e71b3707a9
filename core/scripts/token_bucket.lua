-- Token bucket: capacity tokens, refilled continuously at rate per period.
--
-- KEYS[1]  hash {l = tokens in scaled units, t = µs time of l, s = the period
--          l was scaled by}
-- ARGV[1]  period, µs, divided by gcd(period, rate)
-- ARGV[2]  refill per µs in scaled units (rate divided by the same gcd)
-- ARGV[3]  capacity, tokens
-- ARGV[4]  n, tokens this request costs (1 <= n <= capacity)
-- ARGV[5]  "1" to peek: decide, but consume and write nothing
-- Reply    {allowed 0|1, remaining tokens, retry_after µs, reset_after µs, 0}
--
-- Fixes from seed 000: time is Redis TIME with its microseconds, never
-- truncated to seconds; one hash instead of two keys; the TTL is the time
-- to refill, at least 1 ms, and is set on every write; no per-call logging;
-- tokens are integers (scaled by period), so nothing is lost when Redis
-- turns Lua numbers into integers; the reply has all a header needs.
-- retry_after and reset_after are measured from Redis' clock: after a clock
-- step back they include the step, so a client that waits retry_after is
-- not denied again.
local key = KEYS[1]
local period = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local peek = ARGV[5] == '1'

local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = clock
local full = capacity * period
local cost = n * period

local tokens = full
local state = redis.call('HMGET', key, 'l', 't', 's')
if state[1] then
  tokens = tonumber(state[1])
  local last = tonumber(state[2])
  local scale = tonumber(state[3])
  if scale ~= period then
    -- The Limit changed: carry the tokens over, rounded down.
    tokens = math.floor(tokens / scale * period)
  end
  -- A failover or clock step must not move the bucket back in time.
  if last > now then now = last end
  local missing = full - tokens
  if missing <= 0 or now - last >= math.ceil(missing / rate) then
    tokens = full
  else
    tokens = tokens + (now - last) * rate
  end
end

local allowed = tokens >= cost
local left = tokens
if allowed and not peek then left = tokens - cost end

local skew = now - clock
local retry = 0
if not allowed then retry = math.ceil((cost - tokens) / rate) + skew end
local reset = math.ceil((full - left) / rate)
if reset > 0 then reset = reset + skew end

if allowed and not peek then
  redis.call('HSET', key, 'l', left, 't', now, 's', period)
  redis.call('PEXPIRE', key, math.max(1, math.ceil(reset / 1000)))
elseif not peek and reset > 0 and redis.call('PTTL', key) < math.ceil(reset / 1000) - 1 then
  -- A denial writes no state, but the Limit may have changed since the TTL
  -- was set (a longer period, a lower rate): keep the state as long as it
  -- matters now, or its expiry would hand out a fresh quota. (PTTL is
  -- rounded down to the ms: a TTL 1 ms short is rounding, not a change.)
  redis.call('PEXPIRE', key, math.ceil(reset / 1000))
end
return {allowed and 1 or 0, math.floor(left / period), retry, reset, 0}
