#!lua flags=allow-cross-slot-keys,no-writes
-- owner: KEYS lease; ARGV session key prefix [, '1': live terms only]. {session, token,
-- remaining ms, value} of a live holder, or of the holder of a term in its lock-delay (its
-- delay left), or {}. The value is the term's only if it was set for this token (`vtoken`).
local h = term_of(KEYS[1], 'value', 'vtoken')
if not h[1] or h[1] == '' then return {} end
local now, up = clock()
local left
if ARGV[2] == '1' then
  left = term_left(h, now, up, ARGV[1])
else
  left = block_left(h, now, up, ARGV[1])
end
if not left then return {} end
local value = ''
if h[7] and h[8] == h[2] then value = h[7] end
return {h[1], tonumber(h[2]), left, value}
