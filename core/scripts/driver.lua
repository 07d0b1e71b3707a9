-- Driver: decides requests on one or more caller keys under 1 to 8 layers
-- (Limits, each with its algorithm), in order, at one Redis instant,
-- exactly as one call per request at that instant would. One request under
-- one layer is the common case; the client puts the requests of concurrent
-- callers into one call when it can (several of one key: a hot key; several
-- keys of one slot), and AllowLayers checks several Limits of one key.
--
-- KEYS   for each caller key: each layer's state keys (as many as its
--        algorithm takes), in layer order; all keys of a call share a slot
-- ARGV   L, the number of layers; for each layer its Limit, one string
--        (see limit in the prelude); then for each caller key, in the order
--        of KEYS, its requests: code = n * 8 + mode (n units, mode as the
--        prelude names them), negated when the key's next request follows
--        it, then the stamp of the take for REFUND and RENEW, then for
--        REFUND the take's position under each layer that counts them
--        (pos: the buckets), then the permit id when a layer's algorithm
--        has ids (Concurrency)
-- Reply  clock (Redis TIME, µs: the stamp of every decision of the call,
--        which a REFUND names; 0 when no layer needed it, see own), then for
--        each request, for each layer, five integers: granted units (0: this
--        layer denies; for PEEK the n that would pass; 0 for REFUND, CHARGE
--        and RENEW but a kept permit's 1), remaining units after it,
--        retry_after µs (0 unless denied; a bucket's take replies its
--        position there instead, see POS), reset_after µs (until the quota
--        is whole), and delay µs (LeakyBucket: how long an admitted request
--        waits before it proceeds), or for a period FixedWindow the window's
--        tag, the stamp a REFUND of its units names. A period FixedWindow's
--        take under one layer that has one wait replies in two (fw.packed)
--
-- Under several layers a request is admitted only if every layer admits
-- it, and then takes from each; when any layer denies, none is taken, and
-- each layer's reply says whether it alone would admit. Nothing runs
-- between the two passes: a call is atomic.
local vals0 = {} -- (no values: the algorithm reads its own)
local pos = {} -- (a REFUND's positions, per layer: read before use)

local function run(keys, args)
  if not call then init() end
  local nl = tonumber(args[1])
  local layers, ids = {}, false
  for i = 1, nl do
    layers[i] = specs[args[1 + i]] or limit(args[1 + i])
    ids = ids or layers[i].A.ids
  end
  -- (Several layers' requests share one stamp: the clock.)
  local own = nl == 1 and layers[1].A.own
  local a = 2 + nl
  -- (MGET rather than GET: a key of another type, a Concurrency set,
  -- reads as nil instead of failing.) Layers that read their own state
  -- (own) read the clock only if they need it.
  local vals = vals0
  if own then
    -- (A batch of several keys reads the clock once rather than each
    -- key's TTL.)
    clock = 0
    if #keys > 1 then now() end
  else
    now()
    vals = call('MGET', unpack(keys))
  end
  local out, o, k = {clock}, 1, 1
  local st, resets = {}, {}
  -- A key of one request, a CONSUME, under one layer with a take (most
  -- keys of a batch over many keys) is decided as one decides it: no
  -- table for its state.
  local take = nl == 1 and layers[1].A.take
  local pack = nl == 1 and layers[1].A.packed
  local p1 = layers[1].p
  local takes = own and clock ~= 0 and p1.takes
  local nkeys = #keys
  local took -- (the reply of the INCRBY takes made where it stopped)
  while k <= nkeys do
    if takes then
      k, a, o, took = takes(keys, args, k, a, out, o, p1)
      if k > nkeys then break end
    end
    -- (A take of one unit, code 8, is the common request: no tonumber.)
    local code = take and (args[a] == '8' and 8 or tonumber(args[a]))
    if code and code > 0 and code % 8 == CONSUME then
      local g, r, rt, rs, d = take(keys[k], vals[k], p1, code / 8, took)
      local x, wait
      if pack then x, wait = pack(r, rt, rs, d) end
      if x then
        out[o + 1], out[o + 2] = x, wait
        o = o + 2
      else
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = g, r, rt, rs, d
        o = o + 5
      end
      k, a = k + 1, a + 1
    else
      for i = 1, nl do
        st[i] = layers[i].A.load(keys, k, vals, layers[i].p)
        k = k + layers[i].A.nkeys
      end
      local nonpeek, more = false, true
      while more do
        local code = tonumber(args[a])
        more = code < 0
        if more then code = -code end
        local mode = code % 8
        local n = (code - mode) / 8
        local stamp, id = 0, 0
        a = a + 1
        if mode == REFUND or mode == RENEW then
          stamp = tonumber(args[a])
          a = a + 1
        end
        if mode == REFUND then
          for i = 1, nl do
            if layers[i].A.pos then
              pos[i] = tonumber(args[a])
              a = a + 1
            end
          end
        end
        if ids then
          id = args[a]
          a = a + 1
        end
        if mode ~= PEEK then nonpeek = true end
        if nl == 1 then
          local l = layers[1]
          local g, r, rt, rs, d = l.A.decide(st[1], l.p, n, mode, stamp, l.A.pos and pos[1] or id)
          out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = g, r, rt, rs, d
          o = o + 5
          resets[1] = rs
        else
          local first, all, rep = mode, true, {}
          if mode == CONSUME then first = PEEK end
          for i = 1, nl do
            local l = layers[i]
            rep[i] = {l.A.decide(st[i], l.p, n, first, stamp, l.A.pos and pos[i] or id)}
            if first == PEEK and rep[i][1] == 0 then all = false end
          end
          if mode == CONSUME and all then
            for i = 1, nl do
              local l = layers[i]
              rep[i] = {l.A.decide(st[i], l.p, n, CONSUME, stamp, l.A.pos and 0 or id)}
            end
          end
          for i = 1, nl do
            for j = 1, 5 do out[o + j] = rep[i][j] end
            o = o + 5
            resets[i] = rep[i][4]
          end
        end
      end
      for i = 1, nl do layers[i].A.save(st[i], layers[i].p, resets[i], nonpeek) end
    end
  end
  out[1] = clock
  return out
end

-- one is run for the common call, one request on one state under one
-- Limit: ARGV its Limit, then the request as run takes it (code, stamp,
-- id). The last code's n and mode are kept, as limit keeps the Limit. It
-- replies as run does, or for a fixed window's take, in two integers.
local last_code, last_n, last_mode
local vals1 = {}

local function one(keys, args)
  if not call then init() end
  local l = specs[args[1]] or limit(args[1])
  local A, p = l.A, l.p
  if A.own then
    clock = 0
    if args[2] == '8' then
      -- A fixed window's take of one unit (code 8, the common call)
      -- replies in two integers where it can (A.packed).
      local g, r, rt, rs, d = A.take(keys[1], nil, p, 1)
      -- (A.packed, written out: a call of it would add 2 % here.)
      if rt == 0 then return {d * 68719476736 + r, rs} end
      if rt == rs then return {-(d * 68719476736 + r), rt} end
      return {clock, g, r, rt, rs, d}
    end
  else
    now()
  end
  local a, n, mode = 2, last_n, last_mode
  if args[2] ~= last_code then
    local code = tonumber(args[2])
    mode = code % 8
    n = (code - mode) / 8
    last_code, last_n, last_mode = args[2], n, mode
  end
  local stamp, id = 0, 0
  if mode == REFUND or mode == RENEW then
    a = 3
    stamp = tonumber(args[3])
  end
  if mode == REFUND and A.pos then
    a = 4
    id = tonumber(args[4])
  end
  local vals = vals1
  if A.ids then
    id = args[a + 1]
    vals[1] = nil -- (a set: its load reads it itself)
  elseif A.own then
    vals = vals0 -- (it reads its own)
  elseif A.nkeys == 1 then
    vals[1] = call('GET', keys[1])
  else
    vals = call('MGET', unpack(keys))
  end
  if mode == CONSUME and A.take then
    local g, r, rt, rs, d = A.take(keys[1], vals[1], p, n)
    return {clock, g, r, rt, rs, d}
  end
  local st = A.load(keys, 1, vals, p)
  local g, r, rt, rs, d = A.decide(st, p, n, mode, stamp, id)
  A.save(st, p, rs, mode ~= PEEK)
  return {clock, g, r, rt, rs, d}
end
