//! Process figures at scale: many sessions with many locks in one process.
//!
//! `cargo bench --bench scale` (memory backend; `SIMBA_BENCH_URL` for another backend,
//! `SIMBA_SCALE_SESSIONS` / `SIMBA_SCALE_LOCKS` for the size, default 1000 × 10). Reports the
//! threads per session, the idle CPU of the process, and how long releasing every guard
//! takes (until the backend shows every name free), by `unlock()` and by `drop`, and closing
//! every session.

use simba_lease::{connect, Config, LeaseName, LockGuard, Session};
use std::time::{Duration, Instant};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A field of /proc/self/status or /proc/self/stat (Linux only; 0 elsewhere).
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:").map(|v| v.trim().parse().ok()))
        })
        .flatten()
        .unwrap_or(0)
}

/// User + system CPU time of the process so far, in clock ticks (1/100 s on Linux).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name in parentheses: utime is 14th, stime 15th overall.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

fn main() {
    let short = !std::env::args().any(|a| a == "--bench");
    let url = std::env::var("SIMBA_BENCH_URL").unwrap_or_else(|_| "memory://".into());
    let sessions = env("SIMBA_SCALE_SESSIONS", if short { 20 } else { 1000 });
    let locks = env("SIMBA_SCALE_LOCKS", 10);
    let backend = connect(&url).expect("backend URL");
    let config = Config::default();
    let base = threads();
    let t = Instant::now();
    let all: Vec<Session> = (0..sessions)
        .map(|_| Session::open(backend.clone(), config.clone()).expect("open"))
        .collect();
    let opened = t.elapsed();
    let names: Vec<Vec<LeaseName>> = (0..sessions)
        .map(|s| {
            (0..locks)
                .map(|l| LeaseName::new(format!("scale-{}-{s}-{l}", std::process::id())).unwrap())
                .collect()
        })
        .collect();
    let take = |all: &[Session]| -> Vec<LockGuard> {
        all.iter()
            .zip(&names)
            .flat_map(|(s, ns)| ns.iter().map(|n| s.try_lock(n).unwrap().expect("free")))
            .collect()
    };
    let all_free = || {
        let end = Instant::now() + Duration::from_secs(120);
        while names
            .iter()
            .flatten()
            .any(|n| backend.owner(n).unwrap().is_some())
        {
            assert!(Instant::now() < end, "not released within 120 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let guards = take(&all);
    let per_session = (threads() - base) as f64 / sessions as f64;
    // Two renew intervals, so every session renews twice in the window (a shorter window
    // may see none of some sessions' keep-alives).
    let renew = config.renew_interval();
    let idle_window = if short {
        Duration::from_secs(1)
    } else {
        renew * 2
    };
    let c0 = cpu_ticks();
    std::thread::sleep(idle_window);
    let idle_secs = (cpu_ticks() - c0) as f64 / 100.0;
    let idle_cpu = idle_secs / idle_window.as_secs_f64() * 100.0;
    let keep_alives = sessions as f64 * idle_window.as_secs_f64() / renew.as_secs_f64();
    let per_keep_alive_us = idle_secs * 1e6 / keep_alives;
    let t = Instant::now();
    for g in guards {
        g.unlock().unwrap();
    }
    all_free();
    let unlocked = t.elapsed();
    let guards = take(&all);
    let t = Instant::now();
    drop(guards);
    all_free();
    let dropped = t.elapsed();
    let t = Instant::now();
    for s in &all {
        s.close().unwrap();
    }
    let closed = t.elapsed();
    println!("{sessions} sessions × {locks} locks on {url}");
    println!("| figure | value |\n|---|---|");
    println!("| open all sessions | {opened:.2?} |");
    println!("| threads per session | {per_session:.2} |");
    println!("| idle CPU over {idle_window:.0?}, % of one core | {idle_cpu:.1} |");
    println!(
        "| CPU per keep-alive (one every {renew:?} per session), µs | {per_keep_alive_us:.0} |"
    );
    println!("| unlock() every guard, until all free | {unlocked:.2?} |");
    println!("| drop every guard, until all free | {dropped:.2?} |");
    println!("| close every session | {closed:.2?} |");
}
