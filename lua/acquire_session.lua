-- acquire or join, session slot (cluster): KEYS session, index; ARGV name.
-- {-1} when the session is gone; else {remaining ms, lease ms}; the name is indexed first
-- (a new name counts as a change of the session's leases).
local left = session_left(KEYS[1])
if not left then return {-1} end
if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then redis.call('HINCRBY', KEYS[1], 'v', 1) end
redis.call('PEXPIRE', KEYS[2], left * 2)
return {left, tonumber(redis.call('HGET', KEYS[1], 'lease') or left)}
