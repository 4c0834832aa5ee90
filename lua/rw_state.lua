-- rw_state (a read): KEYS rw lock; ARGV session key prefix [, routed: the sessions the caller
-- found expired (rw_gone: judged so, nothing written)]. {token, writer ('' for none),
-- its token (0), {reader, token, ...}, {waiting writers, first in line first}, {session, mode,
-- token, ms left, ...} of the terms in their lock-delay}: live entries, then delayed ones.
local now, up = clock()
local gone = {}
for i = 2, #ARGV do gone[#gone + 1] = ARGV[i] end
local st = rw_load(KEYS[1], now, up, ARGV[1], false, nil, gone)
local readers = {}
for sid, r in pairs(st.readers) do
  readers[#readers + 1] = sid
  readers[#readers + 1] = r.token
end
local waiting = {}
for _, q in ipairs(st.waiting) do waiting[#waiting + 1] = q.sid end
local w, wt = '', 0
if st.writer then w, wt = st.writer.sid, st.writer.token end
local delayed = {}
for _, d in ipairs(st.delayed) do
  delayed[#delayed + 1] = d.sid
  delayed[#delayed + 1] = d.mode
  delayed[#delayed + 1] = d.token
  delayed[#delayed + 1] = d.left
end
return {st.token, w, wt, readers, waiting, delayed}
