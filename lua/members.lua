-- members: KEYS group; ARGV session key prefix, with metadata (1 on one node, 0 on a cluster).
-- Drops expired members (a bound one once its session is gone), then returns
-- {sid1, metadata1, ...} (with metadata) or {sid1, ...}.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(now))
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], fmt(BOUND), '+inf')) do
  if not session_left(ARGV[1] .. '{' .. id .. '}') then redis.call('ZREM', KEYS[1], id) end
end
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
if ARGV[2] ~= '1' then return ids end
local out = {}
for _, id in ipairs(ids) do
  local skey = ARGV[1] .. '{' .. id .. '}'
  local m = session_left(skey) and redis.call('HGET', skey, 'metadata')
  if m then
    out[#out + 1] = id
    out[#out + 1] = m
  end
end
return out
