-- leave: KEYS group [, groups index, session]; ARGV sid, group name. 1 if sid was a live
-- member. On one node, an expired session's leave changes nothing (its membership ends
-- with it).
if KEYS[3] and not session_left(KEYS[3]) then return 0 end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if KEYS[2] then redis.call('SREM', KEYS[2], ARGV[2]) end
if not score then return 0 end
member_remove(KEYS[1], ARGV[1])
if tonumber(score) > now_ms() then return 1 end
return 0
