-- acquire (one node): KEYS session, leases index, lease; ARGV sid, name, session key prefix
-- [, value]. {-1} when the session is gone; else lease_acquire's reply. A new term is bound
-- to its session (it lives exactly as long) and counts as a change of the session's leases.
-- With a value, the term held (new or not) gets it, as `set_value.lua` sets it; a held term
-- whose value changed is published as 'acquired' too.
local left = session_left(KEYS[1])
if not left then return {-1} end
-- The term is bound to the session: TIME is read only to judge another holder's term.
local r = lease_acquire(KEYS[3], ARGV[1], left, nil, nil, ARGV[3], true)
if r[1] == 1 then
  redis.call('SADD', KEYS[2], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], left * 2)
  if r[4] == 1 then redis.call('HINCRBY', KEYS[1], 'v', 1) end
  if ARGV[4] then
    redis.call('HSET', KEYS[3], 'value', ARGV[4], 'vtoken', fmt(r[2]))
    if r[4] == 0 then redis.call('PUBLISH', KEYS[3], 'acquired') end
  end
end
return r
