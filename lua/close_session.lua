-- close, session slot (cluster): KEYS session, leases index, groups index.
-- Deletes the session; returns {{lease names}, {group names}} (indexes dropped last).
redis.call('DEL', KEYS[1])
return {redis.call('SMEMBERS', KEYS[2]), redis.call('SMEMBERS', KEYS[3])}
