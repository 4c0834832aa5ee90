-- keep_alive (one node): KEYS session, leases index, groups index, the session's delay record
-- [, its rw index: the read-write lock keys it holds or waits for];
-- ARGV sid, lease ms, lease key prefix, group key prefix, session key prefix, the version of
-- the session's leases and read-write terms the caller knows ('' for none), read-write lock
-- key prefix.
-- Returns {-1} once the session is gone; {ms, version, 0} when the session holds the leases
-- and read-write terms of the version the caller knows; else {ms, version, 1, {name1, token1,
-- name2, token2, ...}, {rw name1, mode1, token1, ...}}.
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
  -- Acquire and release (of leases and read-write terms) count every change of what the
  -- session holds; anything else (a lease or lock hash deleted, evicted or rewritten behind
  -- the library's back) shows in a sample of two names of each index per renewal, and the
  -- full lists follow.
  local same = true
  for _, name in ipairs(redis.call('SRANDMEMBER', KEYS[2], 2)) do
    local h = redis.call('HMGET', ARGV[3] .. '{' .. name .. '}', 'session', 'expires')
    if h[1] ~= sid or tonumber(h[2] or '0') < BOUND then same = false end
  end
  if same and KEYS[5] then
    for _, key in ipairs(redis.call('SRANDMEMBER', KEYS[5], 2)) do
      if not rw_touched(key, sid) then same = false end
    end
  end
  if same then return {ms, v, 0} end
  v = redis.call('HINCRBY', KEYS[1], 'v', 1)
end
local now, up = clock()
local leases = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local token = lease_extend(ARGV[3] .. '{' .. name .. '}', sid, ms, now, up, ARGV[5])
  if token then
    leases[#leases + 1] = name
    leases[#leases + 1] = token
  else
    redis.call('SREM', KEYS[2], name)
  end
end
for _, group in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if not member_extend(ARGV[4] .. '{' .. group .. '}', sid, ms, up) then
    redis.call('SREM', KEYS[3], group)
  end
end
-- The read-write terms; a lock the session neither holds nor waits for leaves the index.
local rw = {}
if KEYS[5] then
  local from = #ARGV[7] + 2
  for _, key in ipairs(redis.call('SMEMBERS', KEYS[5])) do
    local terms, has = rw_own(key, sid, now)
    if has == 0 then
      redis.call('SREM', KEYS[5], key)
    else
      for i = 1, #terms, 2 do
        -- The name inside the key's braces: `{rw prefix}{name}`.
        rw[#rw + 1] = string.sub(key, from, -2)
        rw[#rw + 1] = terms[i]
        rw[#rw + 1] = terms[i + 1]
      end
    end
  end
end
return {ms, v, 1, leases, rw}
