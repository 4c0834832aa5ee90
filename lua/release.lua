-- release: KEYS lease [, leases index, session]; ARGV sid, token, name.
-- Frees the lease if sid holds it with token, its term has not run out and (one node) its
-- session is live: an expired session holds nothing, so its release changes nothing. The
-- token stays; 1 if freed.
if KEYS[3] and not session_left(KEYS[3]) then return 0 end
local h = redis.call('HMGET', KEYS[1], 'session', 'token', 'expires')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 0 end
if tonumber(h[3] or '0') <= now_ms() then return 0 end
if KEYS[2] then redis.call('SREM', KEYS[2], ARGV[3]) end
return lease_free(KEYS[1], ARGV[1])
