-- claim_job: KEYS job [, session (one node)]; ARGV sid, at_most ms, session key prefix ('' when
-- session hashes live in other slots: routed). The job hash holds session, token, started,
-- until (this server's clock, ms) and running ('1' while the job runs). It is free once
-- until passed, or (one node) while running once its holder's session hash is gone.
-- {-1} when (one node) the claiming session is gone; {1, token, remaining} when claimed (a
-- new token, until = up + at_most); {0, remaining} when taken.
if KEYS[2] and not session_left(KEYS[2]) then return {-1} end
local now, up = clock()
local h = redis.call('HMGET', KEYS[1], 'session', 'until', 'running')
local ends = tonumber(h[2] or '0')
if ends > now then
  local live = true
  if h[3] == '1' and ARGV[3] ~= '' and h[1] then
    live = session_left(ARGV[3] .. '{' .. h[1] .. '}') ~= nil
  end
  if live then return {0, math.max(ends - up, 0)} end
end
local ms = tonumber(ARGV[2])
local token = redis.call('HINCRBY', KEYS[1], 'token', 1)
redis.call('HSET', KEYS[1], 'session', ARGV[1], 'started', fmt(up), 'until', fmt(up + ms),
  'running', '1')
return {1, token, ms}
