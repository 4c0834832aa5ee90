-- fenced write (simba_lease::fence::RedisFence::put): KEYS the token key, the data key (one
-- hash slot: both carry the fenced key as their hash tag); ARGV the writer's token (decimal),
-- the value. Applies the write only if the token is not below the newest token recorded in
-- the token key, and records it. Returns the newest token after the call, as a string: the
-- writer's own when the write was applied.
local function below(a, b)
  -- a < b for decimal u64 strings, exactly (a Lua number is a double, exact only up to 2^53):
  -- padded to 20 digits and compared as two 10-digit halves.
  a = string.rep('0', 20 - #a) .. a
  b = string.rep('0', 20 - #b) .. b
  local ah, bh = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
  if ah ~= bh then return ah < bh end
  return tonumber(string.sub(a, 11)) < tonumber(string.sub(b, 11))
end
local newest = redis.call('GET', KEYS[1])
if newest and below(ARGV[1], newest) then
  return newest
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return ARGV[1]
