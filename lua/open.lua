-- open: KEYS[1] session; ARGV metadata, lease ms. Returns the remaining ms.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('ERR simba: session id collision')
end
redis.call('HSET', KEYS[1], 'metadata', ARGV[1], 'lease', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return tonumber(ARGV[2])
