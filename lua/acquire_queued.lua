-- acquire in turn (one node, fair locks): KEYS session, leases index, lease, queue, queue
-- deadlines; ARGV sid, name, session key prefix, patience ms.
-- {-1} when the session is gone; acquire's reply when sid holds the lease (its place is
-- gone); queue_waiting's reply when it waits.
local left = session_left(KEYS[1])
if not left then return {-1} end
local sid, sprefix = ARGV[1], ARGV[3]
local now, up = clock()
local ahead = queue_place(KEYS[4], KEYS[5], sid, now, up, tonumber(ARGV[4]), sprefix)
if ahead > 0 and redis.call('HGET', KEYS[3], 'session') ~= sid then
  return queue_waiting(KEYS[3], ahead, now, up, sprefix)
end
local r = lease_acquire(KEYS[3], sid, left, now, up, sprefix, true)
if r[1] ~= 1 then return {2, 0, r[2], r[3], r[4]} end
place_remove(KEYS[4], KEYS[5], sid)
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[2], left * 2)
if r[4] == 1 then redis.call('HINCRBY', KEYS[1], 'v', 1) end
return r
