-- join (one node): KEYS session, groups index, group; ARGV sid, group name.
-- {-1} when the session is gone, else {1}. The membership is bound to the session: it lasts
-- exactly as long.
local left = session_left(KEYS[1])
if not left then return {-1} end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[2], left * 2)
if redis.call('ZADD', KEYS[3], fmt(BOUND), ARGV[1]) == 1 then
  redis.call('PUBLISH', KEYS[3], 'joined')
end
return {1}
