#!lua flags=allow-cross-slot-keys
-- keep_alive, one slot of leases, read-write locks and groups (cluster): KEYS lease keys, then
-- read-write lock keys, then group keys; ARGV sid, ms left of the session, number of lease
-- keys, number of read-write lock keys. Returns one token (or 0 when not held) per lease key,
-- then per read-write lock key rw_extend's {1 if sid still holds or waits for it else 0, mode,
-- token of each term of sid there} (its entries renewed).
local sid, ms, n, m = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4] or '0')
local now, up = clock()
local out = {}
for i = 1, n do
  out[i] = lease_extend(KEYS[i], sid, ms, now, up, nil) or 0
end
for i = n + 1, n + m do
  out[i] = rw_extend(KEYS[i], sid, ms, now, up)
end
for i = n + m + 1, #KEYS do
  member_extend(KEYS[i], sid, ms, up)
end
return out
