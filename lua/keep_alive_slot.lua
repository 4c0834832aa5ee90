#!lua flags=allow-cross-slot-keys
-- keep_alive, one slot of leases and groups (cluster): KEYS lease keys then group keys;
-- ARGV sid, ms left of the session, number of lease keys.
-- Returns one token (or 0 when not held) per lease key.
local sid, ms, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now, up = clock()
local out = {}
for i = 1, n do
  out[i] = lease_extend(KEYS[i], sid, ms, now, up, nil) or 0
end
for i = n + 1, #KEYS do
  member_extend(KEYS[i], sid, ms, up)
end
return out
