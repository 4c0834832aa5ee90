-- close, session slot (cluster): KEYS session, leases index, groups index, the session's
-- delay record. Deletes the session; returns {{lease names}, {group names}, 1 if it was live
-- else 0} (indexes dropped last). The leases of a session that expired are not answered:
-- their terms ended already and keep their lock-delay (so do its read-write terms).
local live = session_left(KEYS[1])
redis.call('DEL', KEYS[1])
if not live then return {{}, redis.call('SMEMBERS', KEYS[3]), 0} end
redis.call('DEL', KEYS[4])
return {redis.call('SMEMBERS', KEYS[2]), redis.call('SMEMBERS', KEYS[3]), 1}
