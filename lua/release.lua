-- release: KEYS lease [, leases index]; ARGV sid, token, name.
-- Frees the lease if sid holds it with token (the token stays); 1 if freed.
local h = redis.call('HMGET', KEYS[1], 'session', 'token')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 0 end
if KEYS[2] then redis.call('SREM', KEYS[2], ARGV[3]) end
return lease_free(KEYS[1], ARGV[1])
