-- acquire, lease slot (cluster): KEYS lease; ARGV sid, full lease ms (on this node's clock).
return lease_acquire(KEYS[1], ARGV[1], tonumber(ARGV[2]), clock())
