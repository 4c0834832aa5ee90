#!lua flags=allow-cross-slot-keys
-- acquire in turn, lease slot (cluster, fair locks): KEYS lease, queue, queue deadlines;
-- ARGV sid, full lease ms (on this node's clock), session key prefix, anchor ('' for none),
-- the bound term's own deadline in ms (as acquire_lease), patience ms, the session's
-- lock-delay in ms. Session hashes live
-- on other slots, so places live by their deadlines only.
-- acquire_lease's reply when sid holds the lease (its place is gone); queue_waiting's reply
-- when it waits.
local sid = ARGV[1]
local now, up = clock()
local ahead = queue_place(KEYS[2], KEYS[3], sid, now, up, tonumber(ARGV[6]), nil)
if ahead > 0 and redis.call('HGET', KEYS[1], 'session') ~= sid then
  return queue_waiting(KEYS[1], ahead, now, up, ARGV[3])
end
local anchor = ARGV[4]
if anchor == '' then anchor = nil end
local r = lease_acquire(KEYS[1], sid, tonumber(ARGV[2]), now, up, ARGV[3], false, anchor,
  tonumber(ARGV[5]), tonumber(ARGV[7] or '0'))
if r[1] ~= 1 then return {2, 0, r[2], r[3], r[4]} end
place_remove(KEYS[2], KEYS[3], sid)
return r
