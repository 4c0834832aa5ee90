#!lua flags=allow-cross-slot-keys
-- keep_alive, every lease and group of a session on one cluster node (Redis 7 script flag
-- allow-cross-slot-keys: keys of several slots, all served by this node): KEYS[1] one of
-- them (it routes the call); ARGV sid, ms left of the session, number of lease keys, then
-- the lease keys, then the group keys. Returns one token (or 0 when not held) per lease key.
-- A key this node does not serve fails the whole call ("non local key"); the caller then
-- renews slot by slot.
local sid, ms, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now, up = clock()
local out = {}
for i = 1, n do
  out[i] = lease_extend(ARGV[3 + i], sid, ms, now, up, nil) or 0
end
for i = 4 + n, #ARGV do
  member_extend(ARGV[i], sid, ms, up)
end
return out
