-- owner: KEYS lease. {session, token, remaining ms} of a live holder, or {}.
local h = redis.call('HMGET', KEYS[1], 'session', 'token', 'expires')
local now, up = clock()
local expires = tonumber(h[3] or '0')
if not h[1] or h[1] == '' or expires <= now then return {} end
return {h[1], tonumber(h[2]), expires - up}
