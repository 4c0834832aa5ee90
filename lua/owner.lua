#!lua flags=allow-cross-slot-keys,no-writes
-- owner: KEYS lease; ARGV session key prefix. {session, token, remaining ms} of a live
-- holder, or {}.
local h = redis.call('HMGET', KEYS[1], 'session', 'token', 'expires', 'anchor', 'epoch')
if not h[1] or h[1] == '' then return {} end
local now, up = clock()
local left = left_of(tonumber(h[3] or '0'), h[1], now, up, ARGV[1], h[4], h[5])
if not left then return {} end
return {h[1], tonumber(h[2]), left}
