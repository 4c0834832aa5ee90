-- close (one node): KEYS session, leases index, groups index, the session's delay record
-- [, its rw index]; ARGV sid, lease key prefix, group key prefix. Deletes the session first,
-- frees its leases (and its lock-delay record) if it was live, its memberships and its
-- read-write terms (if it was live) and places (published, so waiters try again), then drops
-- its indexes. An expired session's terms ended already: they keep their lock-delay.
local sid = ARGV[1]
local live = session_left(KEYS[1])
redis.call('DEL', KEYS[1])
if live then
  redis.call('DEL', KEYS[4])
  for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    lease_free(ARGV[2] .. '{' .. name .. '}', sid)
  end
end
for _, group in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  member_remove(ARGV[3] .. '{' .. group .. '}', sid)
end
if KEYS[5] then
  for _, key in ipairs(redis.call('SMEMBERS', KEYS[5])) do rw_forget(key, sid, live) end
  redis.call('DEL', KEYS[5])
end
redis.call('DEL', KEYS[2], KEYS[3])
return 1
