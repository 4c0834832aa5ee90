-- rw_leave: KEYS rw lock [, the session's rw index (one node)]; ARGV sid, session key prefix
-- [, routed: the sessions the caller found expired (rw_gone)].
-- Removes sid's place among the waiting writers. {1 if it had one else 0, 1 if sid still holds
-- or waits for the name else 0}; one node, the key leaves the index with the last.
local now, up = clock()
if not KEYS[2] then rw_gone(KEYS[1], 3, now) end
local r = rw_leave(KEYS[1], ARGV[1], now, up, ARGV[2])
if KEYS[2] and r[2] == 0 then redis.call('SREM', KEYS[2], KEYS[1]) end
return r
