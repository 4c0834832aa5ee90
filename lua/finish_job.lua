-- finish_job: KEYS job [, session (one node)]; ARGV sid, token, at_least ms. If sid holds the
-- running claim with token, the claim has not run out and (one node) the session lives: the
-- job stays taken until started + at_least (free at once if that passed) and no longer
-- depends on the session. 1 if it did, else 0 (nothing changes).
if KEYS[2] and not session_left(KEYS[2]) then return 0 end
local h = redis.call('HMGET', KEYS[1], 'session', 'token', 'until', 'running', 'started')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] or h[4] ~= '1' then return 0 end
if tonumber(h[3] or '0') <= now_ms() then return 0 end
redis.call('HSET', KEYS[1], 'until', fmt(tonumber(h[5] or '0') + tonumber(ARGV[3])),
  'running', '0')
return 1
