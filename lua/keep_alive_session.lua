-- keep_alive, session slot (cluster): KEYS session, leases index, groups index, the
-- session's delay record;
-- ARGV lease ms, the version of the session's leases the caller knows ('' for none), then
-- lease names to drop from the index (not held for a lease or longer; dropped only when the
-- index is still at the version the caller knows).
-- Returns {-1} once the session is gone, else {ms, version, 1, {lease names}, {group names},
-- lock-delay ms}, or {ms, version, 0, {}, {group names}, lock-delay ms} when the index is
-- still at the version the caller knows. Acquire, release and this script count every change
-- of the index in the version.
local ms = tonumber(ARGV[1])
-- Alive means more than 0 ms left: the same test as acquire and join, so a session that one
-- call found expired is never renewed by another.
if not session_left(KEYS[1]) then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return {-1}
end
redis.call('PEXPIRE', KEYS[1], ms)
redis.call('HSET', KEYS[1], 'lease', ARGV[1])
-- Names are dropped only from the index at the version the caller knows: an acquire since
-- (which counts as a change) may be taking one of them again.
local sv = redis.call('HMGET', KEYS[1], 'v', 'delay')
local v = tonumber(sv[1] or '0')
local delay = tonumber(sv[2] or '0')
if delay > 0 then redis.call('SET', KEYS[4], '1', 'PX', fmt(ms + delay)) end
if #ARGV > 2 and fmt(v) == ARGV[2] then
  local dropped = 0
  for i = 3, #ARGV do dropped = dropped + redis.call('SREM', KEYS[2], ARGV[i]) end
  if dropped > 0 then v = redis.call('HINCRBY', KEYS[1], 'v', 1) end
end
index_ttl(KEYS[2], ms)
index_ttl(KEYS[3], ms)
if fmt(v) == ARGV[2] then return {ms, v, 0, {}, redis.call('SMEMBERS', KEYS[3]), delay} end
return {ms, v, 1, redis.call('SMEMBERS', KEYS[2]), redis.call('SMEMBERS', KEYS[3]), delay}
