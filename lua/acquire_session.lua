-- acquire or join, session slot (cluster): KEYS session, index; ARGV name.
-- {-1} when the session is gone; else {remaining ms, lease ms, lock-delay ms}; the name is
-- indexed first
-- and counts as a change of the session's leases even when it was indexed already: a
-- keep-alive that meant to drop it from the index (not held for a lease) then keeps it.
local left = session_left(KEYS[1])
if not left then return {-1} end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('PEXPIRE', KEYS[2], left * 2)
local s = redis.call('HMGET', KEYS[1], 'lease', 'delay')
return {left, tonumber(s[1] or left), tonumber(s[2] or '0')}
