//! `simba status` and `simba watch`: leases and groups as the backend sees them.

use serde_json::{json, Value};
use simba_lease::spi::{LeaseBackend, RwDelayed, RwState};
use simba_lease::{connect, Config, Event, GroupName, LeaseName, Result, Session, SessionId};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Backend URL.
    url: String,
    /// Lease (election or lock) names; with neither names nor groups, everything the
    /// backend sees: sessions, held leases and groups.
    names: Vec<String>,
    /// Group names (repeatable).
    #[arg(long = "group")]
    groups: Vec<String>,
    /// Read-write lock names (repeatable): each one's writer and readers with their
    /// tokens, the writers waiting, and the newest token handed out. A backend without
    /// read-write locks is an error (exit 2).
    #[arg(long = "rw", value_name = "NAME")]
    rw: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `s` on one line: control characters (a newline in metadata) escaped, the rest as given.
/// A term value as the last column of a lease row: nothing when there is none.
fn value_column(value: &str) -> String {
    match value {
        "" => String::new(),
        v => format!("  {}", one_line(v)),
    }
}

fn one_line(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let e: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            e
        })
        .collect()
}

fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// Everything the backend sees: sessions (with the number of leases each holds), leases and
/// groups.
fn list(a: &Args, backend: &dyn LeaseBackend, pb: &indicatif::ProgressBar) -> Result<ExitCode> {
    let l = backend.list()?;
    pb.finish_and_clear();
    let held = |id: &SessionId| l.leases.iter().filter(|x| &x.owner.session == id).count();
    if a.json {
        let sessions: Vec<_> = l
            .sessions
            .iter()
            .map(|s| {
                json!({"id": s.id.as_str(), "remaining_ms": s.remaining.as_millis() as u64,
                       "metadata": s.metadata.as_str(), "leases": held(&s.id)})
            })
            .collect();
        let leases: Vec<_> = l
            .leases
            .iter()
            .map(|x| {
                json!({"name": x.name.as_str(), "holder": x.owner.session.as_str(),
                       "token": x.owner.token.get(),
                       "remaining_ms": x.owner.remaining.as_millis() as u64,
                       "value": x.owner.value.as_str()})
            })
            .collect();
        let groups: Vec<_> = l
            .groups
            .iter()
            .map(|g| {
                json!({"group": g.name.as_str(), "members": g.members.iter().map(|m| json!({
                    "session": m.session.as_str(), "metadata": m.metadata.as_str()})).collect::<Vec<_>>()})
            })
            .collect();
        println!(
            "{}",
            json!({"backend": backend.kind(), "url": crate::bench::redacted(&a.url),
                   "sessions": sessions, "leases": leases, "groups": groups})
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} ({}): {} session(s), {} held lease(s), {} group(s)",
        crate::bench::redacted(&a.url),
        backend.kind(),
        l.sessions.len(),
        l.leases.len(),
        l.groups.len()
    );
    if !l.sessions.is_empty() {
        println!(
            "\n{:<34} {:>12} {:>6}  metadata",
            "session", "time left", "leases"
        );
        for s in &l.sessions {
            println!(
                "{:<34} {:>12} {:>6}  {}",
                s.id.as_str(),
                secs(s.remaining),
                held(&s.id),
                one_line(s.metadata.as_str())
            );
        }
    }
    if !l.leases.is_empty() {
        println!(
            "\n{:<32} {:<34} {:>8} {:>12}  value",
            "lease", "holder", "token", "time left"
        );
        for x in &l.leases {
            println!(
                "{:<32} {:<34} {:>8} {:>12}{}",
                x.name.as_str(),
                x.owner.session.as_str(),
                x.owner.token.get(),
                secs(x.owner.remaining),
                value_column(&x.owner.value)
            );
        }
    }
    for g in &l.groups {
        println!("\ngroup {} ({} members)", g.name.as_str(), g.members.len());
        for m in &g.members {
            println!("  {} {}", m.session.as_str(), one_line(m.metadata.as_str()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The state of each read-write lock named, as the backend sees it (one read each);
/// [`simba_lease::Error::Unsupported`] on a backend without read-write locks.
fn rw_states(backend: &dyn LeaseBackend, names: &[String]) -> Result<Vec<(LeaseName, RwState)>> {
    names
        .iter()
        .map(|n| {
            let name = LeaseName::new(n.as_str())?;
            let state = backend.rw_state(&name)?;
            Ok((name, state))
        })
        .collect()
}

/// One read-write lock as JSON: `writer` (`{session, token}` or null), `readers`,
/// `writers_waiting` (session ids, first in line first), `last_token` (0: none yet) and
/// `delayed` (terms of expired sessions in their lock-delay: `{session, mode, token,
/// remaining_ms}`).
fn rw_json(name: &LeaseName, s: &RwState) -> Value {
    let holder = |(id, token): &(SessionId, simba_lease::Token)| json!({"session": id.as_str(), "token": token.get()});
    let delayed = |d: &RwDelayed| {
        json!({"session": d.session.as_str(), "mode": d.mode.as_str(), "token": d.token.get(),
               "remaining_ms": u64::try_from(d.remaining.as_millis()).unwrap_or(u64::MAX)})
    };
    json!({
        "name": name.as_str(),
        "writer": s.writer.as_ref().map(holder),
        "readers": s.readers.iter().map(holder).collect::<Vec<_>>(),
        "writers_waiting": s.writers_waiting.iter().map(|id| id.as_str()).collect::<Vec<_>>(),
        "last_token": s.last_token,
        "delayed": s.delayed.iter().map(delayed).collect::<Vec<_>>(),
    })
}

/// One read-write lock as text: a heading with the newest token, then a line per writer,
/// reader, waiting writer and term in its lock-delay (`(free)` when there is none).
fn rw_text(name: &LeaseName, s: &RwState) -> String {
    let mut out = format!("rw lock {} (last token {})\n", name.as_str(), s.last_token);
    if let Some((id, token)) = &s.writer {
        out += &format!(
            "  {:<15} {:<34} token {}\n",
            "writer",
            id.as_str(),
            token.get()
        );
    }
    for (id, token) in &s.readers {
        out += &format!(
            "  {:<15} {:<34} token {}\n",
            "reader",
            id.as_str(),
            token.get()
        );
    }
    for id in &s.writers_waiting {
        out += &format!("  {:<15} {}\n", "waiting writer", id.as_str());
    }
    for d in &s.delayed {
        out += &format!(
            "  {:<15} {:<34} token {}, lock-delay {:.1} s left\n",
            format!("delayed {}", d.mode.as_str()),
            d.session.as_str(),
            d.token.get(),
            d.remaining.as_secs_f64()
        );
    }
    let idle = s.writers_waiting.is_empty() && s.delayed.is_empty();
    if s.writer.is_none() && s.readers.is_empty() && idle {
        out += "  (free)\n";
    }
    out
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let pb = crate::progress::spinner(a.json, None, "connecting");
    let backend = connect(&a.url)?;
    if a.names.is_empty() && a.groups.is_empty() && a.rw.is_empty() {
        pb.set_message("listing sessions, leases and groups");
        let listed = list(&a, backend.as_ref(), &pb);
        pb.finish_and_clear();
        return listed;
    }
    pb.set_message("reading leases and groups");
    let mut leases = Vec::new();
    for n in &a.names {
        let name = LeaseName::new(n.as_str())?;
        leases.push((name.clone(), backend.owner(&name)?));
    }
    let mut groups = Vec::new();
    for g in &a.groups {
        let group = GroupName::new(g.as_str())?;
        groups.push((group.clone(), backend.members(&group)?));
    }
    let rw = rw_states(backend.as_ref(), &a.rw)?;
    pb.finish_and_clear();
    if a.json {
        let leases: Vec<_> = leases
            .iter()
            .map(|(n, o)| match o {
                Some(o) => json!({"name": n.as_str(), "holder": o.session.as_str(),
                                  "token": o.token.get(), "remaining_ms": o.remaining.as_millis() as u64,
                                  "value": o.value.as_str()}),
                None => json!({"name": n.as_str(), "holder": null}),
            })
            .collect();
        let groups: Vec<_> = groups
            .iter()
            .map(|(g, m)| {
                json!({"group": g.as_str(), "members": m.iter().map(|m| json!({
                    "session": m.session.as_str(), "metadata": m.metadata.as_str()})).collect::<Vec<_>>()})
            })
            .collect();
        let rw: Vec<_> = rw.iter().map(|(n, s)| rw_json(n, s)).collect();
        println!(
            "{}",
            json!({"backend": backend.kind(), "leases": leases, "groups": groups,
                   "rw_locks": rw})
        );
        return Ok(ExitCode::SUCCESS);
    }
    if !leases.is_empty() {
        println!(
            "{:<32} {:<34} {:>8} {:>12}  value",
            "lease", "holder", "token", "time left"
        );
    }
    for (n, o) in &leases {
        match o {
            Some(o) => println!(
                "{:<32} {:<34} {:>8} {:>12}{}",
                n.as_str(),
                o.session.as_str(),
                o.token.get(),
                format!("{:.3}s", o.remaining.as_secs_f64()),
                value_column(&o.value)
            ),
            None => println!("{:<32} {:<34} {:>8} {:>12}", n.as_str(), "(free)", "-", "-"),
        }
    }
    for (g, members) in &groups {
        println!("group {} ({} members)", g.as_str(), members.len());
        for m in members {
            println!("  {} {}", m.session.as_str(), m.metadata.as_str());
        }
    }
    for (n, s) in &rw {
        print!("{}", rw_text(n, s));
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, clap::Args)]
pub(crate) struct WatchArgs {
    /// Backend URL.
    url: String,
    /// The lease to follow.
    name: String,
    /// Stop after this many changes (default: never).
    #[arg(long)]
    events: Option<u64>,
    /// Stop after this long (`30s`; default: never).
    #[arg(long = "for", value_parser = crate::duration)]
    for_: Option<Duration>,
    /// One JSON object per line instead of text (`elapsed_ms`, `lease`, `holder`, `token`,
    /// `remaining_ms`, `value`; `holder` null when free).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Prints one line per change of holder or of its term's value: the time since the start,
/// the holder, the token and the value (when there is one).
pub(crate) fn watch(a: WatchArgs) -> Result<ExitCode> {
    let pb = crate::progress::spinner(a.json, None, "connecting");
    let session = Session::open(connect(&a.url)?, Config::default())?;
    let observer = session.observe(a.name.as_str())?;
    pb.finish_and_clear();
    let start = Instant::now();
    let end = a.for_.and_then(|d| start.checked_add(d));
    let mut seen = 0;
    let print = |owner: Option<&simba_lease::Owner>| match owner {
        _ if a.json => println!(
            "{}",
            match owner {
                Some(o) => json!({"elapsed_ms": start.elapsed().as_millis() as u64,
                    "lease": a.name, "holder": o.session.as_str(), "token": o.token.get(),
                    "remaining_ms": o.remaining.as_millis() as u64, "value": o.value.as_str()}),
                None => json!({"elapsed_ms": start.elapsed().as_millis() as u64,
                    "lease": a.name, "holder": null}),
            }
        ),
        Some(o) => println!(
            "{:>10.3}s {} holder {} token {} ({:.3}s left){}",
            start.elapsed().as_secs_f64(),
            a.name,
            o.session.as_str(),
            o.token.get(),
            o.remaining.as_secs_f64(),
            match o.value.as_str() {
                "" => String::new(),
                v => format!(" value {}", one_line(v)),
            }
        ),
        None => println!("{:>10.3}s {} free", start.elapsed().as_secs_f64(), a.name),
    };
    // Only changes are printed: the observer's first event may repeat the state read here.
    let key =
        |o: Option<&simba_lease::Owner>| o.map(|o| (o.session.clone(), o.token, o.value.clone()));
    let first = observer.leader()?;
    let mut last = key(first.as_ref());
    print(first.as_ref());
    let events = observer.events();
    while a.events.is_none_or(|n| seen < n) {
        let wait = match end {
            Some(end) => match end.checked_duration_since(Instant::now()) {
                Some(left) => left,
                None => break,
            },
            None => Duration::from_secs(3600),
        };
        match events.recv_timeout(wait) {
            Ok(Event::LeaderChanged { owner, .. }) if key(owner.as_ref()) != last => {
                last = key(owner.as_ref());
                print(owner.as_ref());
                seen += 1;
            }
            Ok(_) => {}
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
    }
    session.close()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use simba_lease::backends::MemoryBackend;
    use simba_lease::spi::{Call, Delegate, RwAcquire, RwMode};
    use simba_lease::{Error, Metadata};
    use std::sync::Arc;

    fn open(b: &MemoryBackend) -> SessionId {
        b.open_session(Duration::from_secs(60), &Metadata::default())
            .unwrap()
            .id
    }

    fn take(b: &MemoryBackend, s: &SessionId, name: &LeaseName, mode: RwMode) -> RwAcquire {
        b.acquire_rw(s, name, mode, Duration::from_secs(60))
            .unwrap()
    }

    /// Readers holding the name and a writer waiting for it, read back through the SPI and
    /// printed as text and JSON with every session and token.
    #[test]
    fn an_rw_lock_prints_its_holders_waiters_and_last_token() {
        let b = MemoryBackend::new();
        let name = LeaseName::new("catalog").unwrap();
        let (r1, r2, w) = (open(&b), open(&b), open(&b));
        let RwAcquire::Acquired(t1) = take(&b, &r1, &name, RwMode::Read) else {
            panic!("a free name is granted");
        };
        let RwAcquire::Acquired(t2) = take(&b, &r2, &name, RwMode::Read) else {
            panic!("readers share");
        };
        assert!(matches!(
            take(&b, &w, &name, RwMode::Write),
            RwAcquire::Busy { .. }
        ));
        let states = rw_states(&b, &["catalog".to_owned()]).unwrap();
        let (n, s) = &states[0];
        let v = rw_json(n, s);
        assert_eq!(v["name"], "catalog");
        assert!(v["writer"].is_null(), "{v}");
        let readers = v["readers"].as_array().unwrap();
        let mut got: Vec<_> = readers
            .iter()
            .map(|r| {
                (
                    r["session"].as_str().unwrap().to_owned(),
                    r["token"].as_u64().unwrap(),
                )
            })
            .collect();
        got.sort();
        let mut want = vec![
            (r1.as_str().to_owned(), t1.token.get()),
            (r2.as_str().to_owned(), t2.token.get()),
        ];
        want.sort();
        assert_eq!(got, want);
        assert_eq!(v["writers_waiting"], json!([w.as_str()]));
        assert_eq!(v["last_token"], t2.token.get().max(t1.token.get()));
        let text = rw_text(n, s);
        assert!(text.starts_with(&format!("rw lock catalog (last token {})", s.last_token)));
        for line in [
            format!(
                "reader          {:<34} token {}",
                r1.as_str(),
                t1.token.get()
            ),
            format!(
                "reader          {:<34} token {}",
                r2.as_str(),
                t2.token.get()
            ),
            format!("waiting writer  {}", w.as_str()),
        ] {
            assert!(text.contains(&line), "{line:?} missing from\n{text}");
        }
        assert!(!text.contains("(free)"), "{text}");

        // The readers leave: the writer holds it, with a token above theirs.
        for (s, t) in [(&r1, t1.token), (&r2, t2.token)] {
            assert!(b.release_rw(s, &name, RwMode::Read, t).unwrap());
        }
        let RwAcquire::Acquired(tw) = take(&b, &w, &name, RwMode::Write) else {
            panic!("the readers left");
        };
        let states = rw_states(&b, &["catalog".to_owned()]).unwrap();
        let (n, s) = &states[0];
        let v = rw_json(n, s);
        assert_eq!(
            v["writer"],
            json!({"session": w.as_str(), "token": tw.token.get()})
        );
        assert_eq!(v["readers"], json!([]));
        assert_eq!(v["writers_waiting"], json!([]));
        assert_eq!(v["last_token"], tw.token.get());
        let text = rw_text(n, s);
        assert!(
            text.contains(&format!(
                "writer          {:<34} token {}",
                w.as_str(),
                tw.token.get()
            )),
            "{text}"
        );
    }

    /// A name never used is free, with no token yet.
    #[test]
    fn an_unused_rw_lock_is_free() {
        let b = MemoryBackend::new();
        let states = rw_states(&b, &["fresh".to_owned()]).unwrap();
        let (n, s) = &states[0];
        assert_eq!(rw_text(n, s), "rw lock fresh (last token 0)\n  (free)\n");
        assert_eq!(
            rw_json(n, s),
            json!({"name": "fresh", "writer": null, "readers": [], "writers_waiting": [],
                   "last_token": 0, "delayed": []})
        );
    }

    /// A write term whose session expired with a lock-delay is shown with the delay left.
    #[test]
    fn a_term_in_its_lock_delay_is_shown_with_the_delay_left() {
        let clock = Arc::new(simba_lease::ManualClock::new());
        let b = MemoryBackend::with_clock(clock.clone());
        let (lease, delay) = (Duration::from_secs(10), Duration::from_secs(30));
        let s = b
            .open(
                &simba_lease::spi::SessionSpec::new(lease, &Metadata::default()).lock_delay(delay),
            )
            .unwrap()
            .id;
        let name = LeaseName::new("catalog").unwrap();
        let RwAcquire::Acquired(t) = take(&b, &s, &name, RwMode::Write) else {
            panic!("a free name")
        };
        clock.advance(Duration::from_secs(15));
        let states = rw_states(&b, &["catalog".to_owned()]).unwrap();
        let (n, st) = &states[0];
        assert_eq!(
            rw_text(n, st),
            format!(
                "rw lock catalog (last token {0})\n  {1:<15} {2:<34} token {0}, lock-delay 25.0 s left\n",
                t.token.get(),
                "delayed write",
                s.as_str()
            )
        );
        assert_eq!(
            rw_json(n, st)["delayed"],
            json!([{"session": s.as_str(), "mode": "write", "token": t.token.get(),
                    "remaining_ms": 25_000}])
        );
    }

    /// A backend without read-write locks: the memory backend with its `rw_state` refused.
    struct WithoutRw(MemoryBackend);

    impl Delegate for WithoutRw {
        fn with<T>(&self, f: impl FnOnce(&dyn LeaseBackend) -> T) -> T {
            f(&self.0)
        }
        fn call<T>(
            &self,
            call: Call<'_>,
            f: impl FnOnce(&dyn LeaseBackend) -> Result<T>,
        ) -> Result<T> {
            match call {
                Call::RwState { .. } => Err(Error::Unsupported {
                    operation: "read-write locks",
                    backend: "stub",
                }),
                _ => f(&self.0),
            }
        }
    }

    #[test]
    fn a_backend_without_rw_locks_is_reported_as_unsupported() {
        let b = WithoutRw(MemoryBackend::new());
        let e = rw_states(&b, &["catalog".to_owned()]).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "the stub backend does not support read-write locks"
        );
        // A bad name is refused before any read.
        let e = rw_states(&b, &["a b".to_owned()]).unwrap_err();
        assert!(matches!(e, Error::InvalidName { .. }), "{e:?}");
    }
}
