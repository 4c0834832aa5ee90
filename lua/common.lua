-- Helpers shared by every simba-lease script (prepended to each one).
-- Every time decision uses this server's TIME; values are epoch milliseconds.
-- An instant `e` (whole ms) is past once now_ms() >= e. Remaining times are measured from
-- the next whole ms (rounded down: never more than is really left) and new expiries set from
-- it (rounded up: a term lasts at least what was granted).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- now_ms(), and the next whole ms (the same when TIME falls on a whole ms).
local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  local now = tonumber(t[1]) * 1000 + math.floor(us / 1000)
  if us % 1000 == 0 then return now, now end
  return now, now + 1
end

local function fmt(n)
  return string.format('%.0f', n)
end

-- The session's remaining milliseconds, or nil once it is gone.
local function session_left(skey)
  local p = redis.call('PTTL', skey)
  if p <= 0 then return nil end
  return p
end

-- Keeps an index set at least as long as its session plus one lease.
-- (PEXPIRE of a missing key does nothing: no EXISTS first.)
local function index_ttl(ikey, ms)
  redis.call('PEXPIRE', ikey, ms * 2)
end

-- A term or membership bound to its session (one node) carries this mark as its expiry: it
-- is live exactly while its holder's session hash is, so a keep-alive renews it by renewing
-- the session alone. Earlier versions of this library read the mark as a far-future expiry
-- and never take such a term over.
local BOUND = 9000000000000000

-- Cluster anchors. A cluster term may be bound to an anchor: a string key, one per session
-- and node, whose value (an epoch) names its incarnation and whose expiry the session's
-- keep-alive renews, one key per node whatever the number of leases. A bound term records the
-- anchor's key and epoch, and its own `expires` is a far deadline the keep-alive renews now and
-- then. It is live while its own deadline is ahead and, where this node serves the anchor's
-- slot, while the anchor lives with the same epoch. Where this node does not (slots moved), its
-- own deadline alone counts: the holder counts on no more than that deadline either.
-- Every script that judges a term on a cluster carries the flag allow-cross-slot-keys.

-- The anchor's value (false when it is gone), or nil when this node does not serve its slot
-- or the slot is moving. A plain GET is not enough: on the node importing a slot, a script
-- that came through an ASK redirect reads a key not moved yet as missing. A read of two keys
-- of the slot, one of which never exists, fails whenever the slot is migrating or importing
-- (TRYAGAIN or ASK), and elsewhere with a redirect; on a stable slot it reads the anchor.
local function anchor_read(anchor)
  local r = redis.pcall('MGET', anchor, anchor .. ':probe')
  if r.err then return nil end
  return r[1]
end

-- What anchor `anchor` has left in ms while it holds `epoch`; nil once it is gone or holds
-- another epoch; true when this node does not serve its slot (or the slot is moving).
local function anchor_left(anchor, epoch, now, up)
  local v = anchor_read(anchor)
  if v == nil then return true end
  if v ~= epoch then return nil end
  local p = redis.call('PTTL', anchor)
  local left = p - (up - now)
  if p <= 0 or left < 0 then return nil end
  return left
end

-- A new epoch for an anchor: this server's TIME, which never repeats for one key.
local function new_epoch()
  local t = redis.call('TIME')
  return t[1] .. '.' .. t[2]
end

-- Lock-delay. A session with a lock-delay keeps a record beside its session hash
-- (`{session}:delay`, expiring the delay after the session: renewed with it) and, routed, one
-- beside each of its anchors per epoch (`{anchor}:delay:{epoch}`, expiring the delay after that
-- anchor's epoch ends). A term of such a session that ended without a clean end (a release, a
-- close of the live session) blocks its name while the record of what ended it lives, or for
-- its own deadline's term until `expires + delay` (the `delay` field of the lease hash).
local function delay_key(key)
  return key .. ':delay'
end

-- The delay record of `anchor`'s epoch `epoch` (same slot as the anchor).
local function anchor_delay_key(anchor, epoch)
  return anchor .. ':delay:' .. epoch
end

-- Keeps `anchor` live for at least `ms`, created with a new epoch when it is gone; its epoch,
-- or nil when this node does not serve its slot. With a lock-delay `delay` (ms), the epoch's
-- delay record expires `delay` after the anchor.
local function anchor_keep(anchor, ms, now, up, delay)
  local v = anchor_read(anchor)
  if v == nil then return nil end
  local p = redis.call('PTTL', anchor)
  if not v or p <= 0 or p - (up - now) < 0 then
    v = new_epoch()
    redis.call('SET', anchor, v, 'PX', ms)
    p = ms
  elseif p < ms then
    redis.call('PEXPIRE', anchor, ms)
    p = ms
  end
  if delay and delay > 0 then
    redis.call('SET', anchor_delay_key(anchor, v), '1', 'PX', fmt(p + delay))
  end
  return v
end

-- What a term or membership with expiry `expires` of session `sid` has left in ms (now, up:
-- clock()), or nil once it ran out. `sprefix` is the session key prefix (a bound term lives
-- as long as `sprefix{sid}`); `anchor` and `epoch` those of a cluster term bound to an anchor.
local function left_of(expires, sid, now, up, sprefix, anchor, epoch)
  if expires >= BOUND then
    local p = redis.call('PTTL', sprefix .. '{' .. sid .. '}')
    -- PTTL counts from the whole ms begun; never report more than is left.
    local left = p - (up - now)
    if p <= 0 or left < 0 then return nil end
    return left
  end
  if expires <= now then return nil end
  local left = expires - up
  if anchor and anchor ~= '' then
    local a = anchor_left(anchor, epoch, now, up)
    if not a then return nil end
    if a ~= true and a < left then left = a end
  end
  return left
end

-- A lease hash's term: {session, token, expires, anchor, epoch, delay, then the extra fields
-- asked}.
local function term_of(key, ...)
  return redis.call('HMGET', key, 'session', 'token', 'expires', 'anchor', 'epoch', 'delay', ...)
end

-- What the term `h` (term_of) of its holder h[1] has left (left_of), or nil once it ran out.
local function term_left(h, now, up, sprefix)
  return left_of(tonumber(h[3] or '0'), h[1], now, up, sprefix, h[4], h[5])
end

-- What a key's record has left in ms (now, up: clock()), or nil when it is gone.
local function record_left(key, now, up)
  local p = redis.call('PTTL', key)
  local left = p - (up - now)
  if p <= 0 or left <= 0 then return nil end
  return left
end

-- What is left of the lock-delay of the term `h` (term_of), which ran out (term_left is
-- nil), or nil when it blocks its name no longer. Its end: a bound term's is its session's
-- (the session's delay record), an anchored one's its anchor epoch's (that epoch's record)
-- unless its own deadline came first, any other's its own deadline.
local function delay_left(h, now, up, sprefix)
  local expires = tonumber(h[3] or '0')
  if expires >= BOUND then
    if not sprefix or sprefix == '' then return nil end
    return record_left(delay_key(sprefix .. '{' .. h[1] .. '}'), now, up)
  end
  local d = tonumber(h[6] or '0')
  if d <= 0 then return nil end
  local left = expires + d - up
  if h[4] and h[4] ~= '' then
    local a = anchor_left(h[4], h[5], now, up)
    if a == nil then
      -- The anchor's epoch ended: its record says when (read as the anchor is, so a moving
      -- slot reads as "not here": the own deadline alone then counts).
      local key = anchor_delay_key(h[4], h[5])
      local r = redis.pcall('MGET', key, h[4] .. ':probe')
      if not r.err then
        local rec = r[1] and record_left(key, now, up)
        if not rec then return nil end
        if rec < left then left = rec end
      end
    end
  end
  if left <= 0 then return nil end
  return left
end

-- What the term `h` of holder h[1] blocks its name for, for any session but its holder: the
-- term's time left while it lasts, then its lock-delay's; nil once the name is free.
local function block_left(h, now, up, sprefix)
  return term_left(h, now, up, sprefix) or delay_left(h, now, up, sprefix)
end

-- Takes `key` for `sid` for `ms` when free or its holder's term ran out and its lock-delay too
-- (now, up: clock()). {1, token, remaining, new(1|0)} when held by sid; {0, token, remaining,
-- holder} otherwise (remaining: of the term, or of its delay).
-- A new term is published as 'acquired' on the key's channel (a re-acquire is not).
-- With `bind`, a new term is bound to sid's session (one node); with `anchor` (cluster), to
-- that anchor of sid's when this node serves it, with its own deadline `horizon` ms ahead,
-- and the reply gains the anchor's epoch; otherwise it ends at up + ms. `now` may be nil
-- when `bind` is set: TIME is then read only if a holder's term must be judged. `delay` is
-- sid's lock-delay in ms (0 or nil: none), kept with a term that is not bound (a bound term's
-- delay is its session's record).
local function lease_acquire(key, sid, ms, now, up, sprefix, bind, anchor, horizon, delay)
  local h = term_of(key)
  local holder, token = h[1], tonumber(h[2] or '0')
  if holder and holder ~= '' then
    if not now then now, up = clock() end
    local left = term_left(h, now, up, sprefix)
    if left then
      if holder == sid then return {1, token, math.min(left, ms), 0} end
      return {0, token, left, holder}
    end
    if holder ~= sid then
      local d = delay_left(h, now, up, sprefix)
      if d then return {0, token, d, holder} end
    end
  end
  token = redis.call('HINCRBY', key, 'token', 1)
  if delay and delay > 0 and not bind then
    redis.call('HSET', key, 'delay', fmt(delay))
  elseif h[6] then
    redis.call('HDEL', key, 'delay')
  end
  local epoch = nil
  if anchor then epoch = anchor_keep(anchor, ms, now, up, delay) end
  if epoch then
    redis.call('HSET', key, 'session', sid, 'expires', fmt(up + horizon), 'anchor', anchor,
      'epoch', epoch)
    redis.call('PUBLISH', key, 'acquired')
    return {1, token, ms, 1, epoch}
  end
  local ends = BOUND
  if not bind then ends = up + ms end
  redis.call('HSET', key, 'session', sid, 'expires', fmt(ends))
  if h[4] then redis.call('HDEL', key, 'anchor', 'epoch') end
  redis.call('PUBLISH', key, 'acquired')
  return {1, token, ms, 1}
end

-- Extends `key` to at least up + ms if sid holds it (now, up: clock()); its token, or false.
-- A term bound to its session needs no extension; one bound to an anchor is unbound (it then
-- ends at up + ms, which the session outlives by no more than the caller measured).
local function lease_extend(key, sid, ms, now, up, sprefix)
  local h = term_of(key)
  local expires = tonumber(h[3] or '0')
  if h[1] ~= sid or not term_left(h, now, up, sprefix) then return false end
  if h[4] then
    redis.call('HSET', key, 'expires', fmt(up + ms))
    redis.call('HDEL', key, 'anchor', 'epoch')
  elseif expires < BOUND and up + ms > expires then
    redis.call('HSET', key, 'expires', fmt(up + ms))
  end
  return tonumber(h[2])
end

-- Binds `key`, if sid holds it, to anchor `anchor` (live, with `epoch`, on this node) with its
-- own deadline at least `horizon` ms ahead; its token, or false.
local function lease_rebind(key, sid, now, up, anchor, epoch, horizon)
  local h = term_of(key)
  local expires = tonumber(h[3] or '0')
  if h[1] ~= sid or expires >= BOUND or not term_left(h, now, up, nil) then
    return false
  end
  redis.call('HSET', key, 'expires', fmt(math.max(expires, up + horizon)), 'anchor', anchor,
    'epoch', epoch)
  return tonumber(h[2])
end

-- Extends sid's membership of `key` to at least up + ms; whether it is a member.
local function member_extend(key, sid, ms, up)
  if not redis.call('ZSCORE', key, sid) then return false end
  redis.call('ZADD', key, 'XX', 'GT', fmt(up + ms), sid)
  return true
end

-- Frees `key`, which the caller saw held (the token stays); publishes the release.
local function lease_free_held(key)
  redis.call('HSET', key, 'session', '', 'expires', '0')
  redis.call('PUBLISH', key, 'released')
  return 1
end

-- Frees `key` if sid holds it (the token stays); publishes the release.
local function lease_free(key, sid)
  if redis.call('HGET', key, 'session') == sid then return lease_free_held(key) end
  return 0
end

-- Removes sid from the group `key`; publishes the change.
local function member_remove(key, sid)
  if redis.call('ZREM', key, sid) == 1 then
    redis.call('PUBLISH', key, 'left')
    return 1
  end
  return 0
end

-- Fair-lock queues: `qkey` is a sorted set of session ids scored by arrival, `dkey` a hash
-- of each place's deadline (ms, this server's clock). A place is live while its deadline is
-- ahead and, when `sprefix` is given (one node), its session hash lives.
local function place_live(dkey, sid, now, sprefix)
  local d = tonumber(redis.call('HGET', dkey, sid) or '0')
  if d <= now then return false end
  if sprefix and redis.call('EXISTS', sprefix .. '{' .. sid .. '}') == 0 then return false end
  return true
end

-- Removes sid's place.
local function place_remove(qkey, dkey, sid)
  redis.call('HDEL', dkey, sid)
  return redis.call('ZREM', qkey, sid)
end

-- Keeps a queue key at least `ms` longer (a queue nobody asks about again disappears).
local function queue_ttl(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms * 2) end
end

-- Queues sid (once) and keeps its place until up + patience; returns how many live places
-- are ahead of it (the dead ones ahead are removed).
local function queue_place(qkey, dkey, sid, now, up, patience, sprefix)
  if not redis.call('ZSCORE', qkey, sid) then
    local last = redis.call('ZRANGE', qkey, -1, -1, 'WITHSCORES')
    local seq = 1
    if last[2] then seq = tonumber(last[2]) + 1 end
    redis.call('ZADD', qkey, seq, sid)
  end
  redis.call('HSET', dkey, sid, fmt(up + patience))
  queue_ttl(qkey, patience)
  queue_ttl(dkey, patience)
  local ahead = 0
  for _, id in ipairs(redis.call('ZRANGE', qkey, 0, -1)) do
    if id == sid then break end
    if place_live(dkey, id, now, sprefix) then
      ahead = ahead + 1
    else
      place_remove(qkey, dkey, id)
    end
  end
  return ahead
end

-- The reply of a queued acquire that must wait: {2, ahead, token, remaining, holder} while
-- the lease is held (or in its lock-delay), {2, ahead} while it is free.
local function queue_waiting(key, ahead, now, up, sprefix)
  local h = term_of(key)
  if h[1] and h[1] ~= '' then
    local left = block_left(h, now, up, sprefix)
    if left then return {2, ahead, tonumber(h[2]), left, h[1]} end
  end
  return {2, ahead}
end

-- Read-write locks: one hash per name (`{prefix}:rw:{name}`, never expiring: its `token` field
-- is the one counter of the name, never reset), with `seq` (the arrival counter of waiting
-- writers), `writer` = 'sid token expires', one `r:<sid>` = 'token expires' per reader, one
-- `q:<sid>` = 'seq until expires' per waiting writer (`until`: the end of its patience) and,
-- routed, one `d:<sid>` = 'delay ends' per holder with a lock-delay (ms, and the end of its
-- session as known: `ends`).
-- `expires` is BOUND (one node: the entry lives exactly while its session hash does) or an
-- instant in ms (routed: the session's keep-alive moves it on; a new term gets a full lease,
-- a new place the session's known time). Releases and leaves publish 'released' on the hash's
-- channel.
-- Lock-delay: a term entry (writer or reader) whose session ended still blocks the name while
-- its session's delay record lives (bound); routed, from the session's known end `ends` on
-- until both `expires` and `ends + delay` passed. A write term in its delay blocks every new
-- term, a read term new writers (as a live one does); places have none.

-- The words of an entry.
local function rw_words(s)
  local out = {}
  for w in string.gmatch(s, '%S+') do out[#out + 1] = w end
  return out
end

-- Whether an entry of session sid with `expires` lives: bound, while the session hash
-- `sprefix{sid}` lives ('' : cannot be judged here, kept); else while `expires` is ahead.
local function rw_holds(sid, expires, now, sprefix)
  if expires >= BOUND then
    if sprefix == '' then return true end
    return session_left(sprefix .. '{' .. sid .. '}') ~= nil
  end
  return expires > now
end

-- The lock-delay (ms) and the session's known end of a `d:<sid>` field (nil: none).
local function rw_d(d)
  if not d then return 0, nil end
  local w = rw_words(d)
  return tonumber(w[1] or '0') or 0, tonumber(w[2] or '')
end

-- What is left (ms, now, up: clock()) of the lock-delay of sid's term entry ending at
-- `expires` that no longer lives, or nil when it blocks nothing: bound, its session's delay
-- record's time; otherwise until `ends + delay` of its `d:<sid>` field `d` (nil: no delay).
local function rw_delay_left(sid, expires, d, now, up, sprefix)
  if expires >= BOUND then
    if sprefix == '' then return nil end
    return record_left(delay_key(sprefix .. '{' .. sid .. '}'), now, up)
  end
  local delay, ends = rw_d(d)
  if delay <= 0 then return nil end
  local left = math.max(expires, (ends or expires) + delay) - up
  if left <= 0 then return nil end
  return left
end

-- How a routed term entry of sid (not the caller's) that lives until `expires` stands once
-- its session's known end `ends` (of `d:<sid>`) passed: in its lock-delay, the ms it blocks
-- the name still (its own end, and the delay from `ends`); nil while the session may live.
local function rw_past_end(expires, d, now, up)
  local delay, ends = rw_d(d)
  if expires >= BOUND or delay <= 0 or not ends or ends > now then return nil end
  local left = math.max(expires, ends + delay) - up
  if left > 0 then return left end
  if expires > now then return 1 end
  return nil
end

-- The lock `key` with its live entries: {token, seq, writer = {sid, token, expires} or nil,
-- readers = {sid = {token, expires}}, nreaders, waiting = {{sid, seq, until, expires}} first
-- in line first} and its term entries in their lock-delay: delayed = {{sid, mode, token,
-- left}}, dwriter (the delayed writer's sid or nil), dreaders (how many delayed readers).
-- Entries of `caller` (a live session) that no longer live are over, without a delay. With
-- `prune`, the dead entries are deleted (and `d:` fields of sessions with no term left).
-- `gone` (a read, routed): sessions the caller found expired, judged as rw_gone leaves them.
local function rw_load(key, now, up, sprefix, prune, caller, gone)
  local st = {token = 0, seq = 0, readers = {}, nreaders = 0, waiting = {}, delayed = {},
    dreaders = 0}
  local flat = redis.call('HGETALL', key)
  local fields, terms, delays, over = {}, {}, {}, {}
  for i = 1, #flat, 2 do fields[flat[i]] = flat[i + 1] end
  for _, sid in ipairs(gone or {}) do
    local delay, ends = rw_d(fields['d:' .. sid])
    if delay <= 0 then
      over[sid] = true
    elseif ends and ends > now then
      fields['d:' .. sid] = fmt(delay) .. ' ' .. fmt(now)
    end
    fields['q:' .. sid] = nil
  end
  -- A term entry that no longer lives (or, `left` given, whose session's known end passed):
  -- kept (true) while in its lock-delay.
  local function ended(sid, mode, token, expires, left)
    if sid == caller then return false end
    left = left or rw_delay_left(sid, expires, fields['d:' .. sid], now, up, sprefix)
    if not left then return false end
    st.delayed[#st.delayed + 1] = {sid = sid, mode = mode, token = token, left = left}
    if mode == 'write' then st.dwriter = sid else st.dreaders = st.dreaders + 1 end
    terms[sid] = true
    return true
  end
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    local kind, sid, live, w = string.sub(f, 1, 2), string.sub(f, 3), false, nil
    if f == 'token' then
      st.token, live = tonumber(v), true
    elseif f == 'seq' then
      st.seq, live = tonumber(v), true
    elseif f == 'writer' then
      w = rw_words(v)
      if #w == 3 and not over[w[1]] then
        local e = tonumber(w[3])
        local past = w[1] ~= caller and rw_past_end(e, fields['d:' .. w[1]], now, up)
        if past then
          live = ended(w[1], 'write', tonumber(w[2]), e, past)
        elseif rw_holds(w[1], e, now, sprefix) then
          st.writer, live = {sid = w[1], token = tonumber(w[2]), expires = e}, true
          terms[w[1]] = true
        else
          live = ended(w[1], 'write', tonumber(w[2]), e)
        end
      end
    elseif kind == 'r:' then
      w = rw_words(v)
      if #w == 2 and not over[sid] then
        local e = tonumber(w[2])
        local past = sid ~= caller and rw_past_end(e, fields['d:' .. sid], now, up)
        if past then
          live = ended(sid, 'read', tonumber(w[1]), e, past)
        elseif rw_holds(sid, e, now, sprefix) then
          st.readers[sid] = {token = tonumber(w[1]), expires = e}
          st.nreaders, live = st.nreaders + 1, true
          terms[sid] = true
        else
          live = ended(sid, 'read', tonumber(w[1]), e)
        end
      end
    elseif kind == 'q:' then
      w = rw_words(v)
      if #w == 3 and fields[f] and tonumber(w[2]) > now and rw_holds(sid, tonumber(w[3]), now, sprefix) then
        st.waiting[#st.waiting + 1] =
          {sid = sid, seq = tonumber(w[1]), ['until'] = tonumber(w[2]), expires = tonumber(w[3])}
        live = true
      end
    elseif kind == 'd:' then
      delays[#delays + 1] = sid
      live = true
    else
      live = true
    end
    if prune and not live then redis.call('HDEL', key, f) end
  end
  if prune then
    for _, sid in ipairs(delays) do
      if not terms[sid] then redis.call('HDEL', key, 'd:' .. sid) end
    end
  end
  table.sort(st.waiting, function(a, b) return a.seq < b.seq end)
  return st
end

-- Whether sid holds or waits for the lock `st` (rw_load).
local function rw_has(st, sid)
  if st.readers[sid] or (st.writer and st.writer.sid == sid) then return 1 end
  for _, q in ipairs(st.waiting) do
    if q.sid == sid then return 1 end
  end
  return 0
end

-- The reply of an attempt not granted: {0, writer ('' for none), readers, waiting writers,
-- 1 if sid holds or waits for the name else 0}; terms in their lock-delay count as holders.
local function rw_busy(st, sid)
  local w = st.dwriter or ''
  if st.writer then w = st.writer.sid end
  return {0, w, st.nreaders + st.dreaders, #st.waiting, rw_has(st, sid)}
end

-- One attempt of sid at the lock `key` in `mode` ('read' | 'write') with `patience` ms, a new
-- term ending at `expires`, a new place at `ends` (both BOUND, or instants: `ends` is the
-- session's end as known); `delay`: sid's lock-delay in ms, kept in `d:<sid>` with `ends` for a
-- term that is not bound. {1, token, 1 if a new term else 0} when sid holds a term of
-- that mode, else rw_busy. Readers get in while no writer holds (live or in its lock-delay)
-- and no live writer waits (writer preference); a writer while nobody holds the name (live or
-- in a lock-delay) and no writer queued before it waits, else it is queued (once; each
-- attempt keeps its place `patience` longer; a zero patience queues nothing, and ends a place
-- it had). Every new term takes the counter + 1.
local function rw_acquire(key, sid, mode, patience, expires, ends, now, up, sprefix, delay)
  local st = rw_load(key, now, up, sprefix, true, sid)
  local function longer(e, to) if e < BOUND and to > e then return to end return e end
  -- A term of sid with a lock-delay records it with the session's known end (kept if later).
  local function delay_kept()
    if delay and delay > 0 and ends < BOUND then
      local _, known = rw_d(redis.call('HGET', key, 'd:' .. sid))
      redis.call('HSET', key, 'd:' .. sid, fmt(delay) .. ' ' .. fmt(longer(known or 0, ends)))
    end
  end
  local function granted(field, value)
    local t = redis.call('HINCRBY', key, 'token', 1)
    redis.call('HSET', key, field, string.format(value, fmt(t)))
    delay_kept()
    return {1, t, 1}
  end
  if mode == 'read' then
    local r = st.readers[sid]
    if r then
      redis.call('HSET', key, 'r:' .. sid, fmt(r.token) .. ' ' .. fmt(longer(r.expires, expires)))
      delay_kept()
      return {1, r.token, 0}
    end
    if st.writer or st.dwriter or #st.waiting > 0 then return rw_busy(st, sid) end
    return granted('r:' .. sid, '%s ' .. fmt(expires))
  end
  local w = st.writer
  if w and w.sid == sid then
    redis.call('HSET', key, 'writer',
      sid .. ' ' .. fmt(w.token) .. ' ' .. fmt(longer(w.expires, expires)))
    delay_kept()
    return {1, w.token, 0}
  end
  local place, ahead = nil, 0
  for _, q in ipairs(st.waiting) do
    if q.sid == sid then
      place = q
      break
    end
    ahead = ahead + 1
  end
  if w or st.nreaders > 0 or #st.delayed > 0 or ahead > 0 then
    if place then
      -- A one-time try of a queued writer ends its place (it counts in this reply still).
      local patient = up + patience
      if patience == 0 then patient = now end
      redis.call('HSET', key, 'q:' .. sid,
        fmt(place.seq) .. ' ' .. fmt(patient) .. ' ' .. fmt(longer(place.expires, ends)))
    elseif patience > 0 then
      local seq = redis.call('HINCRBY', key, 'seq', 1)
      redis.call('HSET', key, 'q:' .. sid, fmt(seq) .. ' ' .. fmt(up + patience) .. ' ' .. fmt(ends))
      st.waiting[#st.waiting + 1] = {sid = sid, seq = seq, ['until'] = up + patience, expires = ends}
    end
    return rw_busy(st, sid)
  end
  if place then redis.call('HDEL', key, 'q:' .. sid) end
  return granted('writer', sid .. ' %s ' .. fmt(expires))
end

-- Ends sid's `mode` term of `key` with token `token` (a string); publishes the release.
-- {1 if it held that term else 0, 1 if sid still holds or waits for the name else 0}. Dead
-- entries are left to the next acquire (as the memory backend does).
local function rw_release(key, sid, mode, token, now, up, sprefix)
  local st = rw_load(key, now, up, sprefix, false, sid)
  local freed = 0
  if mode == 'read' then
    local r = st.readers[sid]
    if r and fmt(r.token) == token then
      redis.call('HDEL', key, 'r:' .. sid)
      st.readers[sid] = nil
      freed = 1
    end
  elseif st.writer and st.writer.sid == sid and fmt(st.writer.token) == token then
    redis.call('HDEL', key, 'writer')
    st.writer = nil
    freed = 1
  end
  if freed == 1 then
    -- A session holds at most one term of a name: its delay goes with it.
    redis.call('HDEL', key, 'd:' .. sid)
    redis.call('PUBLISH', key, 'released')
  end
  return {freed, rw_has(st, sid)}
end

-- Removes sid's place among the writers waiting for `key` (one that ran out and no acquire
-- removed yet counts, as on the memory backend); publishes it (readers, or the next writer,
-- may wait for it to go). {1 if it had one else 0, rw_has after}.
local function rw_leave(key, sid, now, up, sprefix)
  local left = redis.call('HDEL', key, 'q:' .. sid)
  if left == 1 then redis.call('PUBLISH', key, 'released') end
  return {left, rw_has(rw_load(key, now, up, sprefix, false, sid), sid)}
end

-- Ends whatever sid holds or waits for in `key` (its session closed while `live`); publishes
-- that. A session that had expired keeps its terms: they ended already and keep their
-- lock-delay; only its place goes.
local function rw_forget(key, sid, live)
  if not live then
    local left = redis.call('HDEL', key, 'q:' .. sid)
    if left > 0 then redis.call('PUBLISH', key, 'released') end
    return left
  end
  local removed = redis.call('HDEL', key, 'r:' .. sid, 'q:' .. sid)
  local w = redis.call('HGET', key, 'writer')
  if w and rw_words(w)[1] == sid then removed = removed + redis.call('HDEL', key, 'writer') end
  redis.call('HDEL', key, 'd:' .. sid)
  if removed > 0 then redis.call('PUBLISH', key, 'released') end
  return removed
end

-- Ends, in `key`, what the sessions ARGV[from..] (found expired on their own node by the
-- caller: routed) hold or wait for: their places, and their terms without a lock-delay; a term
-- with one is in its delay from now at the latest. Publishes a release when anything went.
local function rw_gone(key, from, now)
  local removed = 0
  for i = from, #ARGV do
    local sid = ARGV[i]
    removed = removed + redis.call('HDEL', key, 'q:' .. sid)
    local delay, ends = rw_d(redis.call('HGET', key, 'd:' .. sid))
    if delay > 0 then
      if ends and ends > now then
        redis.call('HSET', key, 'd:' .. sid, fmt(delay) .. ' ' .. fmt(now))
      end
    else
      removed = removed + redis.call('HDEL', key, 'r:' .. sid)
      local w = redis.call('HGET', key, 'writer')
      if w and rw_words(w)[1] == sid then removed = removed + redis.call('HDEL', key, 'writer') end
    end
  end
  if removed > 0 then redis.call('PUBLISH', key, 'released') end
end

-- Moves the end of sid's live entries in `key` to at least up + ms (routed keep-alive: bound
-- entries need none), and the session's known end of its `d:<sid>` with them; deletes its dead
-- terms (one in its lock-delay stays). A dead place is left to the next acquire, as a release
-- leaves dead entries (a leave still counts it, as on the memory backend). {1 if sid still
-- holds or waits for the name else 0, then mode, token of each term it holds there, renewed}.
local function rw_extend(key, sid, ms, now, up)
  local h = redis.call('HMGET', key, 'writer', 'r:' .. sid, 'q:' .. sid, 'd:' .. sid)
  -- Whether a term entry of sid lives on, or stays in its lock-delay (its `d:` then stays).
  local ends, out, term_lives, term_stays = up + ms, {0}, false, false
  -- The field, its words, and the index of `expires` among them; the other words stay. A
  -- term (`mode`, its token) kept is listed.
  local function move(field, w, at, live, mode, token)
    local e = tonumber(w[at] or '0')
    if not (live and rw_holds(sid, e, now, '')) then
      if mode and live and rw_delay_left(sid, e, h[4], now, up, '') then
        term_stays = true
      elseif mode then
        redis.call('HDEL', key, field)
      end
      return
    end
    out[1] = 1
    if mode then
      term_lives = true
      out[#out + 1] = mode
      out[#out + 1] = tonumber(token)
    end
    if e < BOUND and ends > e then
      w[at] = fmt(ends)
      redis.call('HSET', key, field, table.concat(w, ' '))
    end
  end
  if h[1] then
    local w = rw_words(h[1])
    if w[1] == sid then move('writer', w, 3, #w == 3, 'write', w[2]) end
  end
  if h[2] then
    local w = rw_words(h[2])
    move('r:' .. sid, w, 2, #w == 2, 'read', w[1])
  end
  if h[3] then
    local w = rw_words(h[3])
    move('q:' .. sid, w, 3, #w == 3 and tonumber(w[2]) > now, nil, nil)
  end
  if h[4] then
    local delay, known = rw_d(h[4])
    if term_lives and (known or 0) < ends then
      redis.call('HSET', key, 'd:' .. sid, fmt(delay) .. ' ' .. fmt(ends))
    elseif not (term_lives or term_stays) then
      redis.call('HDEL', key, 'd:' .. sid)
    end
  end
  return out
end

-- One node, sid's session live: {mode, token, ...} of the terms sid holds in `key` (bound
-- entries live with the session; others while their `expires` is ahead), and 1 if it holds
-- or waits for the name else 0. Reads one HMGET; writes nothing.
local function rw_own(key, sid, now)
  local h = redis.call('HMGET', key, 'writer', 'r:' .. sid, 'q:' .. sid)
  local terms, has = {}, 0
  if h[1] then
    local w = rw_words(h[1])
    if #w == 3 and w[1] == sid and rw_holds(sid, tonumber(w[3]), now, '') then
      terms[#terms + 1] = 'write'
      terms[#terms + 1] = tonumber(w[2])
      has = 1
    end
  end
  if h[2] then
    local w = rw_words(h[2])
    if #w == 2 and rw_holds(sid, tonumber(w[2]), now, '') then
      terms[#terms + 1] = 'read'
      terms[#terms + 1] = tonumber(w[1])
      has = 1
    end
  end
  if h[3] then
    local w = rw_words(h[3])
    if #w == 3 and tonumber(w[2]) > now and rw_holds(sid, tonumber(w[3]), now, '') then
      has = 1
    end
  end
  return terms, has
end

-- Whether `key` has an entry of sid at all (a term or a place, live or not): a keep-alive's
-- sample of the session's rw index (one node), reading no clock.
local function rw_touched(key, sid)
  local h = redis.call('HMGET', key, 'writer', 'r:' .. sid, 'q:' .. sid)
  if h[2] or h[3] then return true end
  return h[1] ~= false and rw_words(h[1])[1] == sid
end
