-- a lease's queue (fair locks): KEYS queue, queue deadlines; ARGV session key prefix, or ''
-- when session hashes live elsewhere (cluster). The session ids of the live places, first
-- first (dead places are removed).
local now = now_ms()
local sprefix = ARGV[1]
if sprefix == '' then sprefix = nil end
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if place_live(KEYS[2], id, now, sprefix) then
    out[#out + 1] = id
  else
    place_remove(KEYS[1], KEYS[2], id)
  end
end
return out
