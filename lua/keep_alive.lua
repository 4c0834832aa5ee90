-- keep_alive (one node): KEYS session, leases index, groups index;
-- ARGV sid, lease ms, lease key prefix, group key prefix.
-- Returns {-1} once the session is gone, else {ms, name1, token1, name2, token2, ...}.
local sid, ms = ARGV[1], tonumber(ARGV[2])
-- Alive means more than 0 ms left: the same test as acquire and join, so a session that one
-- call found expired is never renewed by another.
if not session_left(KEYS[1]) then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return {-1}
end
redis.call('PEXPIRE', KEYS[1], ms)
redis.call('HSET', KEYS[1], 'lease', ARGV[2])
index_ttl(KEYS[2], ms)
index_ttl(KEYS[3], ms)
local now, up = clock()
local out = {ms}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local token = lease_extend(ARGV[3] .. '{' .. name .. '}', sid, ms, now, up)
  if token then
    out[#out + 1] = name
    out[#out + 1] = token
  else
    redis.call('SREM', KEYS[2], name)
  end
end
for _, group in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if not member_extend(ARGV[4] .. '{' .. group .. '}', sid, ms, up) then
    redis.call('SREM', KEYS[3], group)
  end
end
return out
