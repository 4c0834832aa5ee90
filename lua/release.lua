#!lua flags=allow-cross-slot-keys
-- release: KEYS lease [, leases index, session]; ARGV sid, token, name, session key prefix.
-- Frees the lease if sid holds it with token, its term has not run out and (one node) its
-- session is live: an expired session holds nothing, so its release changes nothing. The
-- token stays; 1 if freed (one node: a change of the session's leases).
if KEYS[3] and not session_left(KEYS[3]) then return 0 end
local h = term_of(KEYS[1])
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 0 end
-- A term bound to the session KEYS[3] (sid's, just found live) is live: no TIME, no second
-- PTTL. Any other term is judged by its own deadline.
if not (KEYS[3] and tonumber(h[3] or '0') >= BOUND) then
  local now, up = clock()
  if not term_left(h, now, up, ARGV[4]) then return 0 end
end
if KEYS[2] then redis.call('SREM', KEYS[2], ARGV[3]) end
if KEYS[3] then redis.call('HINCRBY', KEYS[3], 'v', 1) end
return lease_free_held(KEYS[1])
