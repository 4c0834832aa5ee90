-- close, one slot (cluster): KEYS lease keys then group keys; ARGV sid, number of lease keys.
local sid, n = ARGV[1], tonumber(ARGV[2])
for i = 1, n do lease_free(KEYS[i], sid) end
for i = n + 1, #KEYS do member_remove(KEYS[i], sid) end
return 1
