#!lua flags=allow-cross-slot-keys
-- acquire, lease slot (cluster): KEYS lease; ARGV sid, full lease ms (on this node's clock),
-- session key prefix (read only for a term bound by a one-node client of the same server),
-- the session's anchor on this node ('' for none), the bound term's own deadline in ms, the
-- session's lock-delay in ms.
local now, up = clock()
local anchor = ARGV[4]
if anchor == '' then anchor = nil end
return lease_acquire(KEYS[1], ARGV[1], tonumber(ARGV[2]), now, up, ARGV[3], false, anchor,
  tonumber(ARGV[5]), tonumber(ARGV[6] or '0'))
