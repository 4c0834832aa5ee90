-- leave: KEYS group [, groups index]; ARGV sid, group name. 1 if sid was a live member.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if KEYS[2] then redis.call('SREM', KEYS[2], ARGV[2]) end
if not score then return 0 end
member_remove(KEYS[1], ARGV[1])
if tonumber(score) > now_ms() then return 1 end
return 0
