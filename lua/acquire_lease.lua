-- acquire, lease slot (cluster): KEYS lease; ARGV sid, full lease ms (on this node's clock),
-- session key prefix (read only for a term bound by a one-node client of the same server).
local now, up = clock()
return lease_acquire(KEYS[1], ARGV[1], tonumber(ARGV[2]), now, up, ARGV[3], false)
