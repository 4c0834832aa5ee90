-- join, group slot (cluster): KEYS group; ARGV sid, full lease ms (on this node's clock).
local now = now_ms()
if redis.call('ZADD', KEYS[1], 'GT', fmt(now + tonumber(ARGV[2])), ARGV[1]) == 1 then
  redis.call('PUBLISH', KEYS[1], 'joined')
end
return 1
