//! Read-write calls answer on Redis as on the memory backend (the reference), on one server
//! and on the cluster.

use crate::common::*;
use crate::rw::rw_key;
use simba_lease::spi::{KeepAlive, LeaseBackend, RwAcquire, RwMode};
use simba_lease::{LeaseName, Metadata, SessionId};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ends `sid`'s routed entries in the lock `key` now, as its session's expiry does on the
/// lock's node (the keep-alives that moved them on stop): their own end, and the session's
/// known end in its `d:` field, are set to the server's `TIME`. Bound entries (one node) are
/// left: they ended with the session hash.
const END_ENTRIES_NOW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sid = ARGV[1]
local d = redis.call('HGET', KEYS[1], 'd:' .. sid)
if d then
  local delay = string.match(d, '%S+')
  redis.call('HSET', KEYS[1], 'd:' .. sid, delay .. ' ' .. string.format('%.0f', now))
end
for _, f in ipairs({'writer', 'r:' .. sid, 'q:' .. sid}) do
  local v = redis.call('HGET', KEYS[1], f)
  if v then
    local w = {}
    for x in string.gmatch(v, '%S+') do w[#w + 1] = x end
    if (f ~= 'writer' or w[1] == sid) and tonumber(w[#w]) < 9000000000000000 then
      w[#w] = string.format('%.0f', now)
      redis.call('HSET', KEYS[1], f, table.concat(w, ' '))
    end
  end
end
return 1
"#;

/// The same sequence of read-write calls answers as on the memory backend (the reference):
/// grants with the same tokens, the same refusals with the same counts, the same releases
/// and leaves, the same state (terms in their lock-delay included) after each call. Three
/// sessions at a time, with and without a lock-delay; now and then one expires and another
/// takes its place. On the memory backend the expiry moves its clock on (about an hour, the
/// others kept alive) and a delay runs out when that clock passes it; on Redis an expiry
/// deletes the session hash (routed: its entries end now, as when its keep-alives stop) and a
/// delay that ran out on the memory backend is ended by deleting its record and `d:` field,
/// so both see the same delays run. Expired sessions' releases and purges are compared too,
/// and after each call the read-write terms a keep-alive of one current session lists.
fn rw_calls_answer_as_the_memory_backend(make: fn() -> Arc<Isolated>) {
    use simba_lease::backends::MemoryBackend;
    let b = make();
    let clock = Arc::new(simba_lease::ManualClock::new());
    let m = MemoryBackend::with_clock(clock.clone());
    let long = Duration::from_secs(60);
    let hour = Duration::from_secs(3600);
    // Waiting writers' patience outlasts every move of the memory backend's clock.
    let patience = Duration::from_secs(6 * 24 * 3600);
    let name = LeaseName::new(format!("rw-ref-{}", &SessionId::random().as_str()[..8])).unwrap();
    let key = rw_key(&b, &name);
    struct Pair {
        redis: SessionId,
        memory: SessionId,
        /// The memory backend's lock-delay (Redis's is an hour: the case ends it).
        delay: Duration,
        /// While expired with a delay running on the memory backend: when it ends there.
        delayed_until: Option<Instant>,
    }
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    // No delay, or one that runs out after one to three expiries (each moves the clock about
    // an hour).
    let open_pair = |class: u64| {
        let delay = Duration::from_secs(1800 + 3600 * class.saturating_sub(1));
        let (rd, md) = if class == 0 {
            (Duration::ZERO, Duration::ZERO)
        } else {
            (hour, delay)
        };
        Pair {
            redis: b
                .open(
                    &simba_lease::spi::SessionSpec::new(long, &Metadata::default()).lock_delay(rd),
                )
                .unwrap()
                .id,
            memory: m
                .open(
                    &simba_lease::spi::SessionSpec::new(hour, &Metadata::default()).lock_delay(md),
                )
                .unwrap()
                .id,
            delay: md,
            delayed_until: None,
        }
    };
    let mut all: Vec<Pair> = (0..3).map(&open_pair).collect();
    let mut current = [0, 1, 2];
    // Replies with sessions as their index in `all` and remaining times left out.
    let acquire = |bk: &dyn LeaseBackend, ids: &[&SessionId], i: usize, mode, p| match bk
        .acquire_rw(ids[i], &name, mode, p)
        .unwrap()
    {
        RwAcquire::Acquired(t) => format!("granted {}", t.token),
        RwAcquire::Busy {
            writer,
            readers,
            writers_waiting,
        } => format!(
            "busy {:?} {readers} {writers_waiting}",
            writer.map(|w| ids.iter().position(|x| **x == w).unwrap())
        ),
    };
    let state = |bk: &dyn LeaseBackend, ids: &[&SessionId]| {
        let index = |s: &SessionId| ids.iter().position(|x| *x == s).unwrap();
        let st = bk.rw_state(&name).unwrap();
        let mut readers: Vec<(usize, u64)> = st
            .readers
            .iter()
            .map(|(s, t)| (index(s), t.get()))
            .collect();
        readers.sort();
        let waiting: Vec<usize> = st.writers_waiting.iter().map(index).collect();
        let writer = st.writer.map(|(s, t)| (index(&s), t.get()));
        let mut delayed: Vec<(usize, &str, u64)> = st
            .delayed
            .iter()
            .map(|d| (index(&d.session), d.mode.as_str(), d.token.get()))
            .collect();
        delayed.sort();
        format!(
            "{writer:?} {readers:?} {waiting:?} {} delayed {delayed:?}",
            st.last_token
        )
    };
    let mut tokens: Vec<u64> = vec![1];
    let (mut expiries, mut delayed_steps, mut listing_steps) = (0, 0, 0);
    for step in 0..1000 {
        let slot = next(3) as usize;
        let i = current[slot];
        let mode = if next(2) == 0 {
            RwMode::Read
        } else {
            RwMode::Write
        };
        let on_redis: Vec<&SessionId> = all.iter().map(|p| &p.redis).collect();
        let on_memory: Vec<&SessionId> = all.iter().map(|p| &p.memory).collect();
        let (r, mm) = match next(40) {
            0..=17 => {
                let p = if next(3) == 0 {
                    Duration::ZERO
                } else {
                    patience
                };
                (
                    acquire(&*b, &on_redis, i, mode, p),
                    acquire(&m, &on_memory, i, mode, p),
                )
            }
            k @ 18..=28 => {
                // A release with a token handed out before (right or wrong), now and then
                // by an expired session.
                let expired: Vec<usize> = (0..all.len()).filter(|j| !current.contains(j)).collect();
                let j = match expired.len() {
                    n if k == 28 && n > 0 => expired[next(n as u64) as usize],
                    _ => i,
                };
                let t =
                    simba_lease::Token::new(tokens[next(tokens.len() as u64) as usize]).unwrap();
                (
                    format!("{}", b.release_rw(on_redis[j], &name, mode, t).unwrap()),
                    format!("{}", m.release_rw(on_memory[j], &name, mode, t).unwrap()),
                )
            }
            29..=36 => (
                format!("{}", b.leave_rw_queue(on_redis[i], &name).unwrap()),
                format!("{}", m.leave_rw_queue(on_memory[i], &name).unwrap()),
            ),
            37 => {
                b.purge_expired().unwrap();
                m.purge_expired().unwrap();
                ("purged".into(), "purged".into())
            }
            _ => {
                // Session i expires: on the memory backend the clock moves just past its
                // end, the other current sessions kept alive.
                let left = m
                    .list()
                    .unwrap()
                    .sessions
                    .iter()
                    .find(|s| s.id == all[i].memory)
                    .map(|s| s.remaining)
                    .expect("a current session lives");
                for &j in &current {
                    if j != i {
                        m.keep_alive(&all[j].memory, left + hour).unwrap();
                    }
                }
                clock.advance(left + Duration::from_millis(1));
                let now = simba_lease::Clock::now(&*clock);
                let ended = now - Duration::from_millis(1);
                if !all[i].delay.is_zero() {
                    all[i].delayed_until = Some(ended + all[i].delay);
                }
                let sid = all[i].redis.to_string();
                b.command(&["DEL", &b.session_key(&all[i].redis)]);
                b.command(&["EVAL", END_ENTRIES_NOW, "1", &key, &sid]);
                // Delays that ran out on the memory backend end on Redis.
                for p in all.iter_mut() {
                    if p.delayed_until.is_some_and(|u| u <= now) {
                        p.delayed_until = None;
                        let record = format!("{}:delay", b.session_key(&p.redis));
                        b.command(&["DEL", &record]);
                        b.command(&["HDEL", &key, &format!("d:{}", p.redis)]);
                    }
                }
                current[slot] = all.len();
                all.push(open_pair(next(4)));
                expiries += 1;
                ("expired".into(), "expired".into())
            }
        };
        assert_eq!(r, mm, "step {step}: session {i} {mode:?}");
        if let Some(t) = r.strip_prefix("granted ") {
            tokens.push(t.parse().unwrap());
        }
        let on_redis: Vec<&SessionId> = all.iter().map(|p| &p.redis).collect();
        let on_memory: Vec<&SessionId> = all.iter().map(|p| &p.memory).collect();
        let st = state(&*b, &on_redis);
        assert_eq!(st, state(&m, &on_memory), "step {step}: the state");
        if !st.ends_with("delayed []") {
            delayed_steps += 1;
        }
        // The keep-alive of the session of this slot lists the same read-write terms (on the
        // memory backend renewed for what it has left, so its clock's moves stay the same).
        let j = current[slot];
        let left = m
            .list()
            .unwrap()
            .sessions
            .iter()
            .find(|s| s.id == all[j].memory)
            .map(|s| s.remaining)
            .expect("a current session lives");
        let held = |ka: KeepAlive| {
            let mut v: Vec<(String, &str, u64)> = ka
                .rw
                .iter()
                .map(|t| (t.name.to_string(), t.mode.as_str(), t.token.get()))
                .collect();
            v.sort();
            v
        };
        let listed = held(b.keep_alive(&all[j].redis, long).unwrap());
        assert_eq!(
            listed,
            held(m.keep_alive(&all[j].memory, left).unwrap()),
            "step {step}: session {j}'s keep-alive"
        );
        if !listed.is_empty() {
            listing_steps += 1;
        }
    }
    eprintln!(
        "{} grants, {expiries} expiries, {delayed_steps} steps with delayed terms, \
         {listing_steps} keep-alives listing terms",
        tokens.len() - 1
    );
    assert!(
        listing_steps > 100,
        "keep-alives listed terms: {listing_steps} steps"
    );
    assert!(tokens.len() > 20, "the sequence granted terms");
    assert!(expiries > 20, "sessions expired: {expiries}");
    assert!(
        delayed_steps > 100,
        "terms were in their lock-delay: {delayed_steps} steps"
    );
    for &j in &current {
        b.close_session(&all[j].redis).unwrap();
    }
}

#[test]
fn rw_calls_answer_as_the_memory_backend_standalone() {
    rw_calls_answer_as_the_memory_backend(standalone);
}

#[test]
fn rw_calls_answer_as_the_memory_backend_cluster() {
    rw_calls_answer_as_the_memory_backend(cluster);
}
