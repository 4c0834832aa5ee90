-- close (one node): KEYS session, leases index, groups index; ARGV sid, lease key prefix,
-- group key prefix. Deletes the session first, frees its leases and memberships, then drops
-- its indexes.
local sid = ARGV[1]
redis.call('DEL', KEYS[1])
for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  lease_free(ARGV[2] .. '{' .. name .. '}', sid)
end
for _, group in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  member_remove(ARGV[3] .. '{' .. group .. '}', sid)
end
redis.call('DEL', KEYS[2], KEYS[3])
return 1
