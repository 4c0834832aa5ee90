-- rw_state (a read): KEYS rw lock; ARGV session key prefix. {token, writer ('' for none),
-- its token (0), {reader, token, ...}, {waiting writers, first in line first}}: live entries.
local st = rw_load(KEYS[1], now_ms(), ARGV[1], false)
local readers = {}
for sid, r in pairs(st.readers) do
  readers[#readers + 1] = sid
  readers[#readers + 1] = r.token
end
local waiting = {}
for _, q in ipairs(st.waiting) do waiting[#waiting + 1] = q.sid end
local w, wt = '', 0
if st.writer then w, wt = st.writer.sid, st.writer.token end
return {st.token, w, wt, readers, waiting}
