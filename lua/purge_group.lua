-- purge: KEYS group. Removes members whose expiry passed; returns their session ids.
local now = fmt(now_ms())
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #ids > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end
return ids
