-- Leaky bucket as a queue (traffic shaping): requests leave at an even pace
-- of rate per period; a request is admitted with the delay it must wait
-- before it proceeds, while at most capacity units are queued.
--
-- KEYS[1]  hash {l = queued units in scaled units, t = µs time of l, s = the
--          period l was scaled by}
-- ARGV[1]  period, µs, divided by gcd(period, rate)
-- ARGV[2]  drain per µs in scaled units (rate divided by the same gcd)
-- ARGV[3]  capacity (queue length), units
-- ARGV[4]  n, units this request costs (1 <= n <= capacity)
-- ARGV[5]  "1" to peek: decide, but queue and write nothing
-- ARGV[6]  the longest delay to hand out, µs; 0 = only capacity bounds it
-- Reply    {allowed 0|1, remaining units, retry_after µs, reset_after µs,
--           delay µs}
--
-- Fixes from seed 002: Redis TIME instead of the client's clock; one small
-- hash instead of a log of permits; a TTL on every write; the wait is
-- computed for the n this request needs, not from the nearest record.
-- delay, retry_after and reset_after are measured from Redis' clock: after a
-- clock step back they include the step (and max_delay is held to that).
local key = KEYS[1]
local period = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local peek = ARGV[5] == '1'
local max_delay = tonumber(ARGV[6])

local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = clock
local full = capacity * period
local cost = n * period

local level = 0
local state = redis.call('HMGET', key, 'l', 't', 's')
if state[1] then
  level = tonumber(state[1])
  local last = tonumber(state[2])
  local scale = tonumber(state[3])
  if scale ~= period then
    -- The Limit changed: carry the queue over, rounded up.
    level = math.ceil(level / scale * period)
  end
  if last > now then now = last end
  if now - last >= math.ceil(level / rate) then
    level = 0
  else
    level = level - (now - last) * rate
  end
end

-- The queue ahead drains in delay µs; then this request leaves.
local skew = now - clock
local delay = math.ceil(level / rate)
if delay > 0 then delay = delay + skew end
local retry = 0
if level + cost > full then
  retry = math.ceil((level + cost - full) / rate) + skew
end
if max_delay > 0 and delay > max_delay then
  retry = math.max(retry, delay - max_delay)
end

local allowed = retry == 0
local queued = level
if allowed and not peek then queued = level + cost end
local reset = math.ceil(queued / rate)
if reset > 0 then reset = reset + skew end

if allowed and not peek then
  redis.call('HSET', key, 'l', queued, 't', now, 's', period)
  redis.call('PEXPIRE', key, math.max(1, math.ceil(reset / 1000)))
elseif not peek and reset > 0 and redis.call('PTTL', key) < math.ceil(reset / 1000) - 1 then
  -- A denial writes no state, but the Limit may have changed since the TTL
  -- was set (a longer period, a lower rate): keep the state as long as it
  -- matters now, or its expiry would hand out a fresh quota. (PTTL is
  -- rounded down to the ms: a TTL 1 ms short is rounding, not a change.)
  redis.call('PEXPIRE', key, math.ceil(reset / 1000))
end
if not allowed then delay = 0 end
return {allowed and 1 or 0, math.max(0, math.floor((full - queued) / period)), retry, reset, delay}
