#!lua flags=allow-cross-slot-keys
-- keep_alive, one cluster node through the session's anchor there (see anchors in common.lua):
-- KEYS anchor; ARGV sid, ms left of the session, the anchor's epoch the caller knows ('' for
-- none), the own deadline of a bound term in ms, the session's lock-delay in ms, number of
-- lease keys, number of read-write lock keys, then the lease keys to bind (or bind again), the
-- read-write lock keys, then the group keys. Every key is one this node serves (a key it does
-- not serve fails the call with "non local key"; the caller then renews slot by slot).
-- Renews the anchor for at least ms, or creates it with a new epoch when it is gone (every term
-- bound to the old epoch is then over), and sid's read-write terms and places for ms. Returns
-- {1 if the anchor lived with the known epoch else 0, its epoch, then one token (or 0 when not
-- held) per lease key, then per read-write lock key rw_extend's {1 if sid still holds or waits
-- for it else 0, mode, token of each term of sid there, renewed}}.
local sid, ms, known = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local horizon, delay, n = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local m = tonumber(ARGV[7])
local now, up = clock()
local anchor = KEYS[1]
local a = anchor_left(anchor, known, now, up)
if a == true then return redis.error_reply('the anchor is not on this node') end
local confirmed = 0
if a then confirmed = 1 end
local epoch = anchor_keep(anchor, ms, now, up, delay)
local out = {confirmed, epoch}
for i = 1, n do
  out[2 + i] = lease_rebind(ARGV[7 + i], sid, now, up, anchor, epoch, horizon) or 0
end
for i = 1, m do
  out[2 + n + i] = rw_extend(ARGV[7 + n + i], sid, ms, now, up)
end
for i = 8 + n + m, #ARGV do
  member_extend(ARGV[i], sid, ms, up)
end
return out
