#!lua flags=allow-cross-slot-keys,no-writes
-- owner: KEYS lease; ARGV session key prefix. {session, token, remaining ms, value} of a live
-- holder, or {}. The value is the term's only if it was set for this token (`vtoken`).
local h = term_of(KEYS[1], 'value', 'vtoken')
if not h[1] or h[1] == '' then return {} end
local now, up = clock()
local left = term_left(h, now, up, ARGV[1])
if not left then return {} end
local value = ''
if h[6] and h[7] == h[2] then value = h[6] end
return {h[1], tonumber(h[2]), left, value}
