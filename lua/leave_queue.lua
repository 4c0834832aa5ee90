#!lua flags=allow-cross-slot-keys
-- leave a queue (fair locks): KEYS queue, queue deadlines, lease; ARGV sid, session key
-- prefix. Returns 1 if sid had a place. A place given up while the lease is free publishes
-- `released` on the lease's channel, so the next in line tries at once.
local removed = place_remove(KEYS[1], KEYS[2], ARGV[1])
if removed == 1 then
  local h = term_of(KEYS[3])
  local now, up = clock()
  if not h[1] or h[1] == '' or not term_left(h, now, up, ARGV[2]) then
    redis.call('PUBLISH', KEYS[3], 'released')
  end
end
return removed
