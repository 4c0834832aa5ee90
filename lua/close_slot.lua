-- close, one slot (cluster): KEYS lease keys, then read-write lock keys, then group keys; ARGV
-- sid, number of lease keys, number of read-write lock keys, '1' if the session was live ('0':
-- it had expired, its read-write terms keep their lock-delay and only its places go).
local sid, n, m = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3] or '0')
local live = ARGV[4] ~= '0'
for i = 1, n do lease_free(KEYS[i], sid) end
for i = n + 1, n + m do rw_forget(KEYS[i], sid, live) end
for i = n + m + 1, #KEYS do member_remove(KEYS[i], sid) end
return 1
