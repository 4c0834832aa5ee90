-- keep_alive (one node): KEYS session, leases index, groups index, the session's delay record
-- [, its rw index (read-write terms are bound to the session: the index is only kept)];
-- ARGV sid, lease ms, lease key prefix, group key prefix, session key prefix, the version of
-- the session's leases the caller knows ('' for none).
-- Returns {-1} once the session is gone; {ms, version, 0} when the session holds the leases
-- of the version the caller knows; else {ms, version, 1, name1, token1, name2, token2, ...}.
-- Terms and memberships made on one node are bound to the session, so renewing the session
-- renews them all: the cost does not grow with what the session holds.
local sid, ms = ARGV[1], tonumber(ARGV[2])
-- Alive means more than 0 ms left: the same test as acquire and join, so a session that one
-- call found expired is never renewed by another.
if not session_left(KEYS[1]) then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  if KEYS[5] then redis.call('DEL', KEYS[5]) end
  return {-1}
end
redis.call('PEXPIRE', KEYS[1], ms)
redis.call('HSET', KEYS[1], 'lease', ARGV[2])
index_ttl(KEYS[2], ms)
index_ttl(KEYS[3], ms)
if KEYS[5] then index_ttl(KEYS[5], ms) end
local sv = redis.call('HMGET', KEYS[1], 'v', 'delay')
local v = tonumber(sv[1] or '0')
-- The lock-delay record expires the delay after the session (an expired session's stays).
local delay = tonumber(sv[2] or '0')
if delay > 0 then redis.call('SET', KEYS[4], '1', 'PX', fmt(ms + delay)) end
if fmt(v) == ARGV[6] then
  -- Acquire and release count every change of the session's leases; anything else (a lease
  -- hash deleted, evicted or rewritten behind the library's back) shows in a sample of two
  -- names per renewal, and the full list follows.
  local same = true
  for _, name in ipairs(redis.call('SRANDMEMBER', KEYS[2], 2)) do
    local h = redis.call('HMGET', ARGV[3] .. '{' .. name .. '}', 'session', 'expires')
    if h[1] ~= sid or tonumber(h[2] or '0') < BOUND then same = false end
  end
  if same then return {ms, v, 0} end
  v = redis.call('HINCRBY', KEYS[1], 'v', 1)
end
local now, up = clock()
local out = {ms, v, 1}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local token = lease_extend(ARGV[3] .. '{' .. name .. '}', sid, ms, now, up, ARGV[5])
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
