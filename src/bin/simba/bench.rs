//! `simba bench`: latencies through the backend interface and through sessions, next to the
//! backend's floor.

use crate::report::{self, Samples};
use indicatif::ProgressBar;
use simba_lease::spi::{Acquire, LeaseBackend};
use simba_lease::{connect, Config, Error, LeaseName, Metadata, Result, Session, SessionId};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Backend URL, e.g. `redis://127.0.0.1:6379?prefix=bench` or `postgres://user@host/db`.
    /// The run uses lease names `simba-bench-<random>-*`; their token records stay (tokens
    /// are never deleted), so point it at a prefix or table prefix of its own.
    url: String,
    /// Sessions acquiring and releasing at once (each on its own thread and name).
    #[arg(long, default_value_t = 1)]
    sessions: usize,
    /// Leases held by the session of the "keep-alive, many leases" row.
    #[arg(long, default_value_t = 1000)]
    leases: usize,
    /// Iterations of each fast operation (per session).
    #[arg(long, default_value_t = 1000)]
    iterations: u64,
    /// Run each fast operation for this long instead of a number of iterations (`30s`).
    #[arg(long, value_parser = crate::duration)]
    duration: Option<Duration>,
    /// Take-overs after a release to time (through sessions).
    #[arg(long, default_value_t = 100)]
    takeovers: u64,
    /// Failovers after a crash to time (each takes about one `failover-lease`; 0 skips).
    #[arg(long, default_value_t = 3)]
    failovers: u64,
    /// Lease of the sessions of the failover rows.
    #[arg(long, default_value = "2s", value_parser = crate::duration)]
    failover_lease: Duration,
    /// Also draw each operation's latency by percentile (log scale) beside the floor's,
    /// as SVG, to this file (`bench.svg`).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `op` `iterations` times or for `duration`, recording each call.
fn repeat(
    a: &Args,
    s: &mut Samples,
    pb: &ProgressBar,
    mut op: impl FnMut() -> Result<()>,
) -> Result<()> {
    let end = a.duration.map(|d| Instant::now() + d);
    let mut n = 0;
    loop {
        match end {
            Some(end) if Instant::now() >= end => break,
            None if n >= a.iterations => break,
            _ => {}
        }
        let t = Instant::now();
        op()?;
        s.record(t.elapsed());
        n += 1;
        if n % 64 == 0 {
            pb.tick();
        }
    }
    Ok(())
}

fn term_of(r: Acquire, name: &LeaseName) -> Result<simba_lease::Term> {
    match r {
        Acquire::Acquired(t) => Ok(t),
        Acquire::Held(o) => Err(Error::AlreadyHeld { name: name.clone() })
            .inspect_err(|_| eprintln!("{name} is held by session {}", o.session)),
    }
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    if let Some(path) = &a.plot {
        crate::plot::check_path(path)?;
    }
    let backend = connect(&a.url)?;
    let tag = &SessionId::random().as_str()[..8].to_owned();
    let name = |what: &str| LeaseName::new(format!("simba-bench-{tag}-{what}"));
    let pb = crate::progress::spinner(a.json, Some(7), "floor");
    let lease = Duration::from_secs(60);
    let meta = Metadata::default();

    pb.set_message("floor");
    let mut floor = Samples::new("floor: ping");
    repeat(&a, &mut floor, &pb, || backend.ping())?;
    pb.inc(1);

    pb.set_message("acquire and release");
    let mut acquire = Samples::new("acquire (new term)");
    let mut release = Samples::new("release");
    let threads: Vec<_> = (0..a.sessions.max(1))
        .map(|i| {
            let (b, n) = (backend.clone(), name(&format!("acquire-{i}"))?);
            let (iterations, duration) = (a.iterations, a.duration);
            Ok(std::thread::spawn(move || -> Result<(Samples, Samples)> {
                let s = b.open_session(lease, &Metadata::default())?.id;
                let (mut acq, mut rel) = (Samples::new(""), Samples::new(""));
                let end = duration.map(|d| Instant::now() + d);
                let mut k = 0;
                while end.map_or(k < iterations, |e| Instant::now() < e) {
                    let t = Instant::now();
                    let term = term_of(b.acquire(&s, &n)?, &n)?;
                    acq.record(t.elapsed());
                    let t = Instant::now();
                    b.release(&s, &n, term.token)?;
                    rel.record(t.elapsed());
                    k += 1;
                }
                b.close_session(&s)?;
                Ok((acq, rel))
            }))
        })
        .collect::<Result<_>>()?;
    for t in threads {
        let (acq, rel) = t
            .join()
            .map_err(|_| Error::backend("benchmarking", "a session thread panicked"))??;
        acquire.merge(&acq);
        release.merge(&rel);
    }
    pb.inc(1);

    pb.set_message("acquire (held by another)");
    let holder = backend.open_session(lease, &meta)?.id;
    let other = backend.open_session(lease, &meta)?.id;
    let held_name = name("held")?;
    term_of(backend.acquire(&holder, &held_name)?, &held_name)?;
    let mut held = Samples::new("acquire (held by another)");
    repeat(&a, &mut held, &pb, || {
        backend.acquire(&other, &held_name).map(drop)
    })?;
    pb.inc(1);

    pb.set_message("keep-alive");
    let mut ka1 = Samples::new("keep-alive, 1 lease");
    repeat(&a, &mut ka1, &pb, || {
        backend.keep_alive(&holder, lease).map(drop)
    })?;
    let many = backend.open_session(lease, &meta)?.id;
    for i in 0..a.leases {
        let n = name(&format!("many-{i}"))?;
        term_of(backend.acquire(&many, &n)?, &n)?;
        if i % 64 == 0 {
            pb.tick();
        }
    }
    let mut ka_many = Samples::new(format!("keep-alive, {} leases", a.leases));
    repeat(&a, &mut ka_many, &pb, || {
        backend.keep_alive(&many, lease).map(drop)
    })?;
    for s in [&holder, &other, &many] {
        backend.close_session(s)?;
    }
    pb.inc(1);

    pb.set_message("take-over after release");
    let take_over = take_overs(&backend, name("take-over")?, a.takeovers, &pb)?;
    pb.inc(1);
    pb.set_message("failover after crash");
    let failover = failovers(
        &backend,
        name("failover")?,
        a.failovers,
        a.failover_lease,
        &pb,
    )?;
    pb.inc(2);
    pb.finish_and_clear();

    let rows = [acquire, release, held, ka1, ka_many, take_over, failover];
    let kind = backend.kind();
    if let Some(path) = &a.plot {
        crate::plot::write(
            path,
            &format!("simba bench {kind} ({})", redacted(&a.url)),
            &floor,
            &rows,
        )?;
    }
    if a.json {
        println!("{}", report::json(kind, &floor, &rows));
    } else {
        print!(
            "{}",
            report::table(&format!("{kind} ({})", redacted(&a.url)), &floor, &rows)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The URL without its password (the library's own redaction).
pub(crate) fn redacted(url: &str) -> String {
    simba_lease::backends::BackendUrl::parse(url)
        .map(|u| u.redacted().to_owned())
        .unwrap_or_else(|_| "<url>".to_owned())
}

/// From `unlock()` of one session's lock to the return of another session's blocked
/// `lock()` of the same name.
fn take_overs(
    b: &Arc<dyn LeaseBackend>,
    name: LeaseName,
    n: u64,
    pb: &ProgressBar,
) -> Result<Samples> {
    let mut out = Samples::new("take-over after release (sessions)");
    if n == 0 {
        return Ok(out);
    }
    let config = Config::builder().lease(Duration::from_secs(10)).build()?;
    let a = Session::open(b.clone(), config.clone())?;
    let waiter = Session::open(b.clone(), config)?;
    let (go, ready) = (
        crossbeam_channel::bounded::<()>(0),
        crossbeam_channel::bounded(0),
    );
    let (go_rx, got_tx) = (go.1, ready.0);
    let wname = name.clone();
    let t = std::thread::spawn(move || -> Result<()> {
        while go_rx.recv().is_ok() {
            let g = waiter.lock(wname.clone())?;
            let _ = got_tx.send(Instant::now());
            g.unlock()?;
        }
        waiter.close()
    });
    for _ in 0..n {
        let g = a.lock(name.clone())?;
        go.0.send(())
            .map_err(|_| Error::backend("benchmarking", "the waiter ended"))?;
        // Let the waiter find the lock held and start waiting (a benchmark may pause).
        std::thread::sleep(Duration::from_millis(5));
        let t0 = Instant::now();
        g.unlock()?;
        let t1 = ready
            .1
            .recv()
            .map_err(|_| Error::backend("benchmarking", "the waiter ended"))?;
        out.record(t1.saturating_duration_since(t0));
        pb.tick();
    }
    drop(go.0);
    t.join()
        .map_err(|_| Error::backend("benchmarking", "the waiter panicked"))??;
    a.close()?;
    Ok(out)
}

/// From the crash of the leader's process (its session stops without closing) to the
/// election of a waiting candidate: about one lease, the rest is the backend's and the
/// engine's reaction.
fn failovers(
    b: &Arc<dyn LeaseBackend>,
    name: LeaseName,
    n: u64,
    lease: Duration,
    pb: &ProgressBar,
) -> Result<Samples> {
    let mut out = Samples::new(format!("failover after crash ({lease:?} lease)"));
    let config = Config::builder()
        .lease(lease)
        .renew_interval(lease / 4)
        .build()?;
    for _ in 0..n {
        let leader = Session::open(b.clone(), config.clone())?;
        let e = leader.election(name.clone())?;
        e.wait_elected(lease * 10)?;
        let next = Session::open(b.clone(), config.clone())?;
        let candidate = next.election(name.clone())?;
        let t0 = Instant::now();
        leader.abandon();
        candidate.wait_elected(lease * 10)?;
        out.record(t0.elapsed());
        // The crashed session's handle does nothing any more (no release).
        drop(e);
        candidate.resign()?;
        next.close()?;
        pb.tick();
    }
    Ok(out)
}
