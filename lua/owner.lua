#!lua flags=allow-cross-slot-keys,no-writes
-- owner: KEYS lease; ARGV session key prefix. {session, token, remaining ms, value} of a live
-- holder, or {}. The value is the term's only if it was set for this token (`vtoken`).
local h = redis.call('HMGET', KEYS[1], 'session', 'token', 'expires', 'anchor', 'epoch',
  'value', 'vtoken')
if not h[1] or h[1] == '' then return {} end
local now, up = clock()
local left = left_of(tonumber(h[3] or '0'), h[1], now, up, ARGV[1], h[4], h[5])
if not left then return {} end
local value = ''
if h[6] and h[7] == h[2] then value = h[6] end
return {h[1], tonumber(h[2]), left, value}
