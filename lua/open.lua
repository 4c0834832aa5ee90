-- open: KEYS session, its delay record; ARGV metadata, lease ms, lock-delay ms ('0': none).
-- Returns the remaining ms. With a delay, the session hash keeps it and its record expires
-- the delay after the session (see lock-delay in common.lua).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('ERR simba: session id collision')
end
local delay = tonumber(ARGV[3] or '0')
redis.call('HSET', KEYS[1], 'metadata', ARGV[1], 'lease', ARGV[2])
if delay > 0 then
  redis.call('HSET', KEYS[1], 'delay', ARGV[3])
  redis.call('SET', KEYS[2], '1', 'PX', fmt(tonumber(ARGV[2]) + delay))
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return tonumber(ARGV[2])
