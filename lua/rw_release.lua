-- rw_release: KEYS rw lock [, session, the session's rw index (one node)]; ARGV sid, mode,
-- token, session key prefix [, routed: the sessions the caller found expired (rw_gone)].
-- Ends sid's term of that mode and token (one node: only while its session lives: an expired
-- session holds nothing, and its terms keep their lock-delay). {1 if it ended it else 0, 1 if
-- sid still holds or waits for the name else 0}; one node, the key leaves the index with the
-- last, and a term ended counts as a change of what the session holds (its version `v`).
if KEYS[2] and not session_left(KEYS[2]) then return {0, 0} end
local now, up = clock()
if not KEYS[2] then rw_gone(KEYS[1], 5, now) end
local r = rw_release(KEYS[1], ARGV[1], ARGV[2], ARGV[3], now, up, ARGV[4])
if KEYS[3] and r[2] == 0 then redis.call('SREM', KEYS[3], KEYS[1]) end
if KEYS[2] and r[1] == 1 then redis.call('HINCRBY', KEYS[2], 'v', 1) end
return r
