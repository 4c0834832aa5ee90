-- acquire (one node): KEYS session, leases index, lease; ARGV sid, name.
-- {-1} when the session is gone; else lease_acquire's reply. A new term lasts as long as
-- its session.
local left = session_left(KEYS[1])
if not left then return {-1} end
local r = lease_acquire(KEYS[3], ARGV[1], left, clock())
if r[1] == 1 then
  redis.call('SADD', KEYS[2], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], left * 2)
end
return r
