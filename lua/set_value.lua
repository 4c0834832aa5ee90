#!lua flags=allow-cross-slot-keys
-- set_value: KEYS lease; ARGV sid, token, value, session key prefix. Sets the value of sid's
-- term with this token while the term lasts (a bound term: while its session hash lives; a
-- cluster term: while its anchor does). The value is stored with its term's token
-- (`vtoken`), so a later term never shows it. Publishes 'acquired' on the lease's channel
-- (observers read the owner again). 1 if set, else 0.
local h = term_of(KEYS[1])
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 0 end
local now, up = clock()
if not term_left(h, now, up, ARGV[4]) then return 0 end
redis.call('HSET', KEYS[1], 'value', ARGV[3], 'vtoken', ARGV[2])
redis.call('PUBLISH', KEYS[1], 'acquired')
return 1
