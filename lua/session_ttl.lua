-- session_ttl: KEYS session. {its ms left (PTTL: -2 gone, -1 no expiry), its lock-delay ms
-- (0: none)}: what a routed read-write call reads of a session it knows no deadline of.
return {redis.call('PTTL', KEYS[1]), tonumber(redis.call('HGET', KEYS[1], 'delay') or '0')}
