-- session_metadata (cluster): KEYS session. The metadata of a live session (more than 0 ms
-- left, the same test as every other script), or false.
if not session_left(KEYS[1]) then return false end
return redis.call('HGET', KEYS[1], 'metadata')
