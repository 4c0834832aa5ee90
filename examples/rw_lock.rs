//! Three readers and one writer, each with its own session, share a catalog behind one
//! read-write lock: the readers read together, the writer waits for them and then writes
//! alone (a new reader waits meanwhile: writer preference), and the catalog checks every
//! term's fencing token: a read below the newest write, or a write below the newest access,
//! is refused.
//!
//! Features: none. URL: `memory://` unless a backend URL is the first argument, which needs
//! that backend's feature and read-write locks (a backend without them answers
//! `Error::Unsupported`):
//!
//! ```text
//! cargo run --example rw_lock
//! cargo run --example rw_lock --features redis -- 'redis://127.0.0.1:6379?prefix=example'
//! ```

use simba_lease::{connect, fence, Config, Error, LeaseName, Session, Token};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A resource that checks the tokens of the terms touching it (the rule of the guide's
/// page on read-write locks).
#[derive(Default)]
struct Catalog {
    /// The newest write token applied: reads below it are stale.
    newest_write: Option<Token>,
    /// The newest token of any read or write served: writes below it are stale.
    newest_seen: Option<Token>,
    entries: Vec<String>,
}

impl Catalog {
    fn read(&mut self, token: Token) -> Result<usize, Error> {
        fence::check("catalog", self.newest_write, token)?;
        self.newest_seen = self.newest_seen.max(Some(token));
        Ok(self.entries.len())
    }

    fn write(&mut self, token: Token, entry: String) -> Result<(), Error> {
        fence::check("catalog", self.newest_seen, token)?;
        self.newest_write = Some(token);
        self.newest_seen = Some(token);
        self.entries.push(entry);
        Ok(())
    }
}

fn main() -> Result<(), Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let backend = connect(&url)?;
    let open = || Session::open(backend.clone(), Config::default());
    let readers: Vec<Session> = (0..3).map(|_| open()).collect::<Result<_, _>>()?;
    let (writer, late) = (open()?, open()?);
    let catalog = Mutex::new(Catalog::default());
    catalog.lock().unwrap().entries.push("seed".into());
    let name = LeaseName::new("catalog")?;

    // The readers hold their terms together.
    let read_terms: Vec<_> = readers
        .iter()
        .map(|s| s.rw_lock(&name)?.read_timeout(Duration::from_secs(10)))
        .collect::<Result<_, _>>()?;
    for (i, r) in read_terms.iter().enumerate() {
        let n = catalog.lock().unwrap().read(r.token())?;
        println!(
            "reader {i}: read term, token {}, sees {n} entries",
            r.token()
        );
    }
    let paused_reader = read_terms[0].token();

    let written = std::thread::scope(|scope| -> Result<Token, Error> {
        let w = scope.spawn(|| -> Result<Token, Error> {
            let guard = writer
                .rw_lock(&name)?
                .write_timeout(Duration::from_secs(10))?;
            let token = guard.check()?;
            let entry = format!("written with token {token}");
            catalog.lock().unwrap().write(token, entry)?;
            println!("writer: write term, token {token}, wrote alone");
            guard.unlock()?;
            Ok(token)
        });
        // Once the writer waits for the readers, a new reader waits too (writer preference).
        let until = Instant::now() + Duration::from_secs(10);
        while backend.rw_state(&name)?.writers_waiting.is_empty() {
            assert!(Instant::now() < until, "the writer never waited");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(late.rw_lock(&name)?.try_read()?.is_none());
        println!("late reader: waits, a writer is waiting");
        for r in read_terms {
            r.unlock()?; // the writer gets the name when the last reader leaves
        }
        w.join().expect("the writer thread")
    })?;

    // A reader that slept through the write comes back with its old token: refused.
    match catalog.lock().unwrap().read(paused_reader) {
        Err(Error::StaleToken { token, newest, .. }) => {
            println!("catalog: refused a read with token {token}: write {newest} landed since")
        }
        other => panic!("a read older than the write was served: {other:?}"),
    }
    let read = late.rw_lock(&name)?.read_timeout(Duration::from_secs(10))?;
    assert!(
        read.token() > written,
        "a read term's token is above the last write's"
    );
    let n = catalog.lock().unwrap().read(read.token())?;
    println!(
        "late reader: read term, token {}, sees {n} entries",
        read.token()
    );
    read.unlock()?;
    for s in readers.iter().chain([&writer, &late]) {
        s.close()?;
    }
    Ok(())
}
