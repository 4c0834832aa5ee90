-- keep_alive, session slot (cluster): KEYS session, leases index, groups index;
-- ARGV lease ms, then lease names to drop from the index (not held for a lease or longer).
-- Returns {-1} once the session is gone, else {ms, {lease names}, {group names}}.
local ms = tonumber(ARGV[1])
-- Alive means more than 0 ms left: the same test as acquire and join, so a session that one
-- call found expired is never renewed by another.
if not session_left(KEYS[1]) then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return {-1}
end
redis.call('PEXPIRE', KEYS[1], ms)
redis.call('HSET', KEYS[1], 'lease', ARGV[1])
for i = 2, #ARGV do redis.call('SREM', KEYS[2], ARGV[i]) end
index_ttl(KEYS[2], ms)
index_ttl(KEYS[3], ms)
return {ms, redis.call('SMEMBERS', KEYS[2]), redis.call('SMEMBERS', KEYS[3])}
