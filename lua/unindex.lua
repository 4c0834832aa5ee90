-- unindex, session slot (cluster): KEYS index [, session]; ARGV name. Removes the name from
-- the session's index; with the session key, a removal counts as a change of its leases.
local removed = redis.call('SREM', KEYS[1], ARGV[1])
if removed == 1 and KEYS[2] then redis.call('HINCRBY', KEYS[2], 'v', 1) end
return removed
