-- join, group slot (cluster): KEYS group; ARGV sid, full lease ms (on this node's clock).
-- 1 when this call made sid a live member (published), 0 when it already was one.
local now, up = clock()
local old = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], 'GT', fmt(up + tonumber(ARGV[2])), ARGV[1])
if old and tonumber(old) > now then return 0 end
redis.call('PUBLISH', KEYS[1], 'joined')
return 1
