-- rw_acquire: KEYS rw lock [, session, the session's rw index (one node)]; ARGV sid, mode
-- ('read' | 'write'), patience ms, session key prefix, then routed: the ms a new term lasts
-- (the session's lease), the session's lock-delay ms ('0': none), the ms the session has
-- left as the caller knows it, and the sessions the caller found expired (rw_gone).
-- One node: {-1} when the session is gone; a new entry is bound to the session (it lives
-- exactly as long, then its term blocks the name while the session's delay record lives), the
-- lock's key is indexed (for the keep-alive's list and for close), and a new term counts as a
-- change of what the session holds (its version `v`, by which the keep-alive answers
-- "unchanged"). Routed: a new term ends that many ms ahead on this node's clock, a new place
-- when the session's known time ends, and the session's keep-alive moves them on; a term with
-- a delay blocks the name from the session's known end until both its own end and that end
-- plus the delay passed (`d:<sid>`). A grant is {1, token, remaining ms (one node: the
-- session's; routed: the lease's), 1 if new else 0}, anything else rw_busy's reply.
local sid, mode, patience, sprefix = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local now, up = clock()
local left, expires, ends, delay
if KEYS[2] then
  left = session_left(KEYS[2])
  if not left then return {-1} end
  expires, ends = BOUND, BOUND
else
  left = tonumber(ARGV[5])
  expires = up + left
  delay = tonumber(ARGV[6] or '0')
  ends = up + math.min(tonumber(ARGV[7] or ARGV[5]), left)
  rw_gone(KEYS[1], 8, now)
end
local r = rw_acquire(KEYS[1], sid, mode, patience, expires, ends, now, up, sprefix, delay)
if KEYS[3] and (r[1] == 1 or r[5] == 1) then
  redis.call('SADD', KEYS[3], KEYS[1])
  redis.call('PEXPIRE', KEYS[3], left * 2)
  if r[1] == 1 and r[3] == 1 then redis.call('HINCRBY', KEYS[2], 'v', 1) end
end
if r[1] == 1 then return {1, r[2], left, r[3]} end
return r
