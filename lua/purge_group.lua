-- purge: KEYS group; ARGV session key prefix. Removes members whose expiry passed (a bound
-- one once its session is gone); returns their session ids.
local now = fmt(now_ms())
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #ids > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], fmt(BOUND), '+inf')) do
  if not session_left(ARGV[1] .. '{' .. id .. '}') then
    redis.call('ZREM', KEYS[1], id)
    ids[#ids + 1] = id
  end
end
return ids
