//! Fenced writes (`simba_lease::fence`) on the real resources: PostgreSQL, MariaDB (for
//! MySQL 8), Redis one server and Cluster, and a directory.
//!
//! Every backend runs the same cases through its `put`/`get`:
//! * a paused former holder's write (older token, from a real lock) is refused with
//!   `StaleToken` naming both tokens after a newer term wrote, and changes nothing;
//! * writers of several terms hammering one key from their own threads and connections: a
//!   write that starts after a higher token's write was accepted is refused, every accepted
//!   write's token is at least every token accepted before it started, equal-token re-writes
//!   are all accepted, and the final value is the highest token's last write.
//!
//! The SQL fences also run those cases on the caller's own `UPDATE` fenced by
//! `check_and_record` in the caller's transaction.
//!
//! Isolation: every case has its own table (`fence_<stamp>…`, dropped at the end), key prefix
//! (its keys deleted at the end) or temporary directory (removed at the end). Servers (from
//! `.ci/servers.sh`): `SIMBA_POSTGRES_URL`, `SIMBA_MYSQL_URL`, `SIMBA_REDIS_URL`,
//! `SIMBA_REDIS_CLUSTER_URL`.

use simba_lease::fence::{Fenced, FileFence};
use simba_lease::{Config, Error, Session, Token};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

/// A fenced store under test, on a connection of its own.
trait Store: Send {
    fn put(&mut self, key: &str, token: Token, value: &[u8]) -> Result<(), Error>;
    /// The newest token recorded for `key` and the value written with it.
    fn get(&mut self, key: &str) -> Result<Option<(Token, Vec<u8>)>, Error>;
}

/// Makes one store per thread, all on the same resource.
type Make<'a> = &'a (dyn Fn() -> Box<dyn Store + 'a> + Sync);

/// A fence's `get` as the cases read it.
fn pair(got: Option<Fenced>) -> Option<(Token, Vec<u8>)> {
    got.map(|f| (f.token, f.value))
}

fn token(v: u64) -> Token {
    Token::new(v).unwrap()
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
fn env_url(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// A case's name stamp: letters, digits and `_` (valid in SQL names, keys and paths).
fn stamp() -> String {
    simba_lease::tck::stamped_prefix("fence_").replace('-', "_")
}

/// Two lock terms of one name from `memory://` sessions: the older term's token (the
/// former holder, now paused) and the newer's.
fn two_terms() -> (Token, Token) {
    let url = format!("memory://{}", simba_lease::tck::unique("fence"));
    let a = Session::connect(&url, Config::default()).unwrap();
    let b = Session::connect(&url, Config::default()).unwrap();
    let old = a.lock("job").unwrap();
    let stale = old.token();
    drop(old); // its term ends: in real life it expired while its holder was paused
    let new = b.lock("job").unwrap();
    assert!(new.token() > stale);
    (stale, new.token())
}

/// A paused former holder's write is refused once a newer term wrote.
fn paused_former_holder_is_refused(make: Make<'_>, key: &str) {
    let mut store = make();
    let (stale, newer) = two_terms();
    assert_eq!(store.get(key).unwrap(), None);
    store.put(key, stale, b"old holder, on time").unwrap();
    // The former holder pauses here; the next term writes.
    store.put(key, newer, b"new holder").unwrap();
    // The former holder wakes up and writes with its old token.
    match store.put(key, stale, b"old holder, late") {
        Err(Error::StaleToken {
            key: k,
            token: t,
            newest,
            ..
        }) => assert_eq!((k.as_str(), t, newest), (key, stale, newer)),
        other => panic!("expected StaleToken, got {other:?}"),
    }
    assert_eq!(
        store.get(key).unwrap(),
        Some((newer, b"new holder".to_vec()))
    );
    // Equal tokens (the holder's own re-writes) pass.
    store.put(key, newer, b"new holder, again").unwrap();
    assert_eq!(
        store.get(key).unwrap(),
        Some((newer, b"new holder, again".to_vec()))
    );
    // Another key starts with no token: the old token is not stale there.
    let other = format!("{key}.other");
    store.put(&other, stale, b"x").unwrap();
    assert_eq!(store.get(&other).unwrap(), Some((stale, b"x".to_vec())));
}

/// Writes of `TERMS` terms hammering one key, each term from a thread and connection of
/// its own: never an older token's write after a newer one.
fn concurrent_terms_never_interleave(make: Make<'_>, key: &str) {
    const TERMS: u64 = 4;
    const WRITES: usize = 40;
    let base = 1_000; // tokens base+1 ..= base+TERMS
    let top = base + TERMS;
    // The first write creates the key, so that the threads race on an existing row.
    make().put(key, token(base), b"start").unwrap();
    let done = AtomicU64::new(base); // the highest token whose accepted write returned
    let refused = AtomicU64::new(0);
    let start = Barrier::new(TERMS as usize);
    std::thread::scope(|s| {
        for t in base + 1..=top {
            let (done, refused, start) = (&done, &refused, &start);
            s.spawn(move || {
                let mut store = make();
                start.wait();
                for i in 0..WRITES {
                    let before = done.load(Ordering::SeqCst);
                    let value = format!("{t}:{i}");
                    match retry_transient(|| store.put(key, token(t), value.as_bytes())) {
                        Ok(()) => {
                            assert!(
                                t >= before,
                                "token {t} accepted after token {before} was accepted"
                            );
                            done.fetch_max(t, Ordering::SeqCst);
                        }
                        Err(Error::StaleToken {
                            token: mine,
                            newest,
                            ..
                        }) => {
                            assert_eq!(mine, token(t));
                            assert!(newest > mine, "{newest} refused {mine}");
                            assert!(t < top, "the highest token was refused");
                            refused.fetch_add(1, Ordering::Relaxed);
                            // Refused once, refused for good: the term is over.
                            let again = store.put(key, token(t), b"again");
                            assert!(matches!(again, Err(Error::StaleToken { .. })), "{again:?}");
                            return;
                        }
                        Err(e) => panic!("write {i} of token {t}: {}", e.report()),
                    }
                }
            });
        }
    });
    let last = format!("{top}:{}", WRITES - 1).into_bytes();
    assert_eq!(make().get(key).unwrap(), Some((token(top), last)));
    eprintln!(
        "{key}: {} of {TERMS} terms were refused while hammering",
        refused.load(Ordering::Relaxed)
    );
}

/// Runs a write again after a transient failure that left nothing applied (a deadlock, a
/// serialization failure: the statement was rolled back).
fn retry_transient(mut write: impl FnMut() -> Result<(), Error>) -> Result<(), Error> {
    let mut attempts = 0;
    loop {
        match write() {
            Err(e) if e.is_transient() && attempts < 20 && rolled_back(&e) => attempts += 1,
            other => return other,
        }
    }
}

/// Whether a failure is a server's rollback of the statement (deadlock, serialization).
fn rolled_back(e: &Error) -> bool {
    let text = e.report().to_string().to_lowercase();
    text.contains("deadlock") || text.contains("serializ")
}

// ---------------------------------------------------------------------------------------
// A directory.

mod file {
    use super::*;
    use std::path::PathBuf;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            let dir = std::env::temp_dir().join(stamp());
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    struct Dir(FileFence);

    impl Store for Dir {
        fn put(&mut self, key: &str, token: Token, value: &[u8]) -> Result<(), Error> {
            self.0.put(key, token, value)
        }
        fn get(&mut self, key: &str) -> Result<Option<(Token, Vec<u8>)>, Error> {
            self.0.get(key).map(pair)
        }
    }

    #[test]
    fn paused_former_holder_is_refused_file() {
        let dir = TempDir::new();
        let fence = FileFence::new(&dir.0);
        paused_former_holder_is_refused(&|| Box::new(Dir(fence.clone())), "report");
        assert_eq!(
            fence.newest("report").unwrap().map(|t| t.get() > 1),
            Some(true)
        );
    }

    #[test]
    fn concurrent_terms_never_interleave_file() {
        let dir = TempDir::new();
        let fence = FileFence::new(&dir.0);
        concurrent_terms_never_interleave(&|| Box::new(Dir(fence.clone())), "report");
        // Only the newest version is left (and no temporary file).
        let left: Vec<_> = std::fs::read_dir(dir.0.join("report"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["00000000000000001004"]);
    }
}

// ---------------------------------------------------------------------------------------
// PostgreSQL.

#[cfg(feature = "postgres")]
mod postgres_fence {
    use super::*;
    use postgres::{Client, NoTls};
    use simba_lease::fence::PostgresFence;

    fn connect() -> Client {
        let url = env_url(
            "SIMBA_POSTGRES_URL",
            "postgres://postgres@127.0.0.1:5432/test",
        );
        Client::connect(&url, NoTls).unwrap()
    }

    /// A fence table of the case's own, dropped at the end.
    struct Table {
        fence: PostgresFence,
    }

    impl Table {
        fn new() -> Self {
            let fence = PostgresFence::new(&stamp()).unwrap();
            fence.install(&mut connect()).unwrap();
            fence.install(&mut connect()).unwrap(); // idempotent
            Table { fence }
        }
    }

    impl Drop for Table {
        fn drop(&mut self) {
            let t = self.fence.table();
            let _ = connect().batch_execute(&format!(
                "drop table if exists {t}; drop table if exists {t}_data"
            ));
        }
    }

    struct Pg(PostgresFence, Client);

    impl Store for Pg {
        fn put(&mut self, key: &str, token: Token, value: &[u8]) -> Result<(), Error> {
            self.0.put(&mut self.1, key, token, value)
        }
        fn get(&mut self, key: &str) -> Result<Option<(Token, Vec<u8>)>, Error> {
            self.0.get(&mut self.1, key).map(pair)
        }
    }

    /// The caller's own `UPDATE` of a table of its own (`<table>_data`, one row), fenced
    /// by `check_and_record` in the same transaction; `get` reads that row.
    struct OwnUpdate(PostgresFence, Client);

    impl OwnUpdate {
        fn new(fence: &PostgresFence) -> Self {
            let mut client = connect();
            client
                .batch_execute(&format!(
                    "create table if not exists {t}_data (id int primary key, v text not null, \
                     token bigint not null); \
                     insert into {t}_data values (1, '', 0) on conflict do nothing",
                    t = fence.table()
                ))
                .unwrap();
            OwnUpdate(fence.clone(), client)
        }
    }

    impl Store for OwnUpdate {
        fn put(&mut self, key: &str, token: Token, value: &[u8]) -> Result<(), Error> {
            let mut tx = self.1.transaction().unwrap();
            self.0.check_and_record(&mut tx, key, token)?; // refused: `tx` rolls back
            let sql = format!(
                "update {}_data set v = $1, token = $2 where id = 1",
                self.0.table()
            );
            let v = String::from_utf8(value.to_vec()).unwrap();
            tx.execute(&sql, &[&v, &(token.get() as i64)]).unwrap();
            tx.commit().unwrap();
            Ok(())
        }
        fn get(&mut self, key: &str) -> Result<Option<(Token, Vec<u8>)>, Error> {
            let recorded = self.0.get(&mut self.1, key)?;
            let row = self
                .1
                .query_one(
                    &format!("select v, token from {}_data where id = 1", self.0.table()),
                    &[],
                )
                .unwrap();
            let (v, t): (String, i64) = (row.get(0), row.get(1));
            Ok(recorded.map(|r| {
                assert_eq!(r.token.get(), t as u64, "the fence and the data disagree");
                assert!(r.value.is_empty());
                (r.token, v.into_bytes())
            }))
        }
    }

    #[test]
    fn paused_former_holder_is_refused_postgres() {
        let t = Table::new();
        paused_former_holder_is_refused(&|| Box::new(Pg(t.fence.clone(), connect())), "report");
    }

    #[test]
    fn concurrent_terms_never_interleave_postgres() {
        let t = Table::new();
        concurrent_terms_never_interleave(&|| Box::new(Pg(t.fence.clone(), connect())), "report");
    }

    #[test]
    fn paused_former_holder_is_refused_in_own_transaction_postgres() {
        let t = Table::new();
        paused_former_holder_is_refused(&|| Box::new(OwnUpdate::new(&t.fence)), "ledger");
    }

    #[test]
    fn concurrent_terms_never_interleave_in_own_transaction_postgres() {
        let t = Table::new();
        concurrent_terms_never_interleave(&|| Box::new(OwnUpdate::new(&t.fence)), "ledger");
    }

    #[test]
    fn a_refused_check_leaves_the_transaction_to_roll_back_postgres() {
        let t = Table::new();
        let mut c = connect();
        t.fence.put(&mut c, "k", token(9), b"nine").unwrap();
        let mut tx = c.transaction().unwrap();
        let e = t
            .fence
            .check_and_record(&mut tx, "k", token(8))
            .unwrap_err();
        assert!(matches!(e, Error::StaleToken { .. }) && !e.is_transient());
        drop(tx);
        // An applied check that is rolled back records nothing.
        let mut tx = c.transaction().unwrap();
        t.fence.check_and_record(&mut tx, "k", token(12)).unwrap();
        tx.rollback().unwrap();
        let got = t.fence.get(&mut c, "k").unwrap().unwrap();
        assert_eq!((got.token, got.value.as_slice()), (token(9), &b"nine"[..]));
        // A missing table is the server's error, with the table's name.
        let missing = PostgresFence::new(&format!("{}_missing", t.fence.table())).unwrap();
        let e = missing.put(&mut c, "k", token(1), b"").unwrap_err();
        assert!(
            e.report().to_string().contains("_missing"),
            "{}",
            e.report()
        );
    }
}

// ---------------------------------------------------------------------------------------
// MySQL 8 / MariaDB.

#[cfg(feature = "mysql")]
mod mysql_fence {
    use super::*;
    use mysql::prelude::Queryable;
    use mysql::{Conn, Opts, TxOpts};
    use simba_lease::fence::MysqlFence;

    fn connect() -> Conn {
        let url = env_url("SIMBA_MYSQL_URL", "mysql://simba:simba@127.0.0.1:3306/test");
        Conn::new(Opts::from_url(&url).unwrap()).unwrap()
    }

    struct Table {
        fence: MysqlFence,
    }

    impl Table {
        fn new() -> Self {
            let fence = MysqlFence::new(&stamp()).unwrap();
            fence.install(&mut connect()).unwrap();
            fence.install(&mut connect()).unwrap(); // idempotent
            Table { fence }
        }
    }

    impl Drop for Table {
        fn drop(&mut self) {
            let t = self.fence.table();
            let _ = connect().query_drop(format!("drop table if exists {t}, {t}_data"));
        }
    }

    struct My(MysqlFence, Conn);

    impl Store for My {
        fn put(&mut self, key: &str, token: Token, value: &[u8]) -> Result<(), Error> {
            self.0.put(&mut self.1, key, token, value)
        }
        fn get(&mut self, key: &str) -> Result<Option<(Token, Vec<u8>)>, Error> {
            self.0.get(&mut self.1, key).map(pair)
        }
    }

    /// The caller's own `UPDATE`, fenced by `check_and_record` in the same transaction.
    struct OwnUpdate(MysqlFence, Conn);

    impl OwnUpdate {
        fn new(fence: &MysqlFence) -> Self {
            let mut conn = connect();
            let t = fence.table();
            conn.query_drop(format!(
                "create table if not exists {t}_data (id int primary key, v varchar(64) not \
                 null, token bigint not null) engine = InnoDB"
            ))
            .unwrap();
            conn.query_drop(format!("insert ignore into {t}_data values (1, '', 0)"))
                .unwrap();
            OwnUpdate(fence.clone(), conn)
        }
    }

    impl Store for OwnUpdate {
        fn put(&mut self, key: &str, token: Token, value: &[u8]) -> Result<(), Error> {
            let mut tx = self.1.start_transaction(TxOpts::default()).unwrap();
            self.0.check_and_record(&mut tx, key, token)?; // refused: `tx` rolls back
            let sql = format!(
                "update {}_data set v = ?, token = ? where id = 1",
                self.0.table()
            );
            tx.exec_drop(sql, (value, token.get())).unwrap();
            tx.commit().unwrap();
            Ok(())
        }
        fn get(&mut self, key: &str) -> Result<Option<(Token, Vec<u8>)>, Error> {
            let recorded = self.0.get(&mut self.1, key)?;
            let (v, t): (Vec<u8>, u64) = self
                .1
                .query_first(format!(
                    "select v, token from {}_data where id = 1",
                    self.0.table()
                ))
                .unwrap()
                .unwrap();
            Ok(recorded.map(|r| {
                assert_eq!(r.token.get(), t, "the fence and the data disagree");
                assert!(r.value.is_empty());
                (r.token, v)
            }))
        }
    }

    #[test]
    fn paused_former_holder_is_refused_mysql() {
        let t = Table::new();
        paused_former_holder_is_refused(&|| Box::new(My(t.fence.clone(), connect())), "report");
    }

    #[test]
    fn concurrent_terms_never_interleave_mysql() {
        let t = Table::new();
        concurrent_terms_never_interleave(&|| Box::new(My(t.fence.clone(), connect())), "report");
    }

    #[test]
    fn paused_former_holder_is_refused_in_own_transaction_mysql() {
        let t = Table::new();
        paused_former_holder_is_refused(&|| Box::new(OwnUpdate::new(&t.fence)), "ledger");
    }

    #[test]
    fn concurrent_terms_never_interleave_in_own_transaction_mysql() {
        let t = Table::new();
        concurrent_terms_never_interleave(&|| Box::new(OwnUpdate::new(&t.fence)), "ledger");
    }

    /// The outcome comes from the OK reply's insert id: a new row (no id), an update after
    /// another statement set `LAST_INSERT_ID` on the same connection, and both statements.
    #[test]
    fn the_outcome_is_read_from_each_statements_own_reply_mysql() {
        let t = Table::new();
        let mut c = connect();
        t.fence.put(&mut c, "a", token(7), b"seven").unwrap();
        t.fence.put(&mut c, "a", token(7), b"seven again").unwrap(); // sets LAST_INSERT_ID(7)
        t.fence.check_and_record(&mut c, "b", token(3)).unwrap(); // a new row after it
        t.fence.check_and_record(&mut c, "b", token(3)).unwrap(); // equal: unchanged row
        c.query_drop("select last_insert_id(100)").unwrap();
        t.fence.put(&mut c, "c", token(2), b"two").unwrap(); // new row, id 100 before
        let e = t.fence.put(&mut c, "a", token(6), b"six").unwrap_err();
        assert!(matches!(e, Error::StaleToken { newest, .. } if newest == token(7)));
        let e = t.fence.check_and_record(&mut c, "b", token(2)).unwrap_err();
        assert!(matches!(e, Error::StaleToken { newest, .. } if newest == token(3)));
        assert_eq!(
            t.fence.get(&mut c, "a").unwrap().unwrap().value,
            b"seven again"
        );
        assert_eq!(t.fence.get(&mut c, "b").unwrap().unwrap().value, b"");
        assert_eq!(t.fence.get(&mut c, "c").unwrap().unwrap().token, token(2));
        // An applied check that is rolled back records nothing.
        let mut tx = c.start_transaction(TxOpts::default()).unwrap();
        t.fence.check_and_record(&mut tx, "b", token(12)).unwrap();
        tx.rollback().unwrap();
        assert_eq!(t.fence.get(&mut c, "b").unwrap().unwrap().token, token(3));
    }
}

// ---------------------------------------------------------------------------------------
// Redis, one server and Cluster.

#[cfg(feature = "redis")]
mod redis_fence {
    use super::*;
    use redis::ConnectionLike;
    use simba_lease::fence::RedisFence;

    fn standalone() -> Box<dyn ConnectionLike + Send> {
        let url = env_url("SIMBA_REDIS_URL", "redis://127.0.0.1:6379");
        Box::new(redis::Client::open(url).unwrap().get_connection().unwrap())
    }

    fn cluster() -> Box<dyn ConnectionLike + Send> {
        let url = env_url(
            "SIMBA_REDIS_CLUSTER_URL",
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
        );
        let hosts = url.strip_prefix("redis+cluster://").unwrap();
        let hosts = hosts.split(['?', '/']).next().unwrap();
        let nodes: Vec<String> = hosts.split(',').map(|h| format!("redis://{h}")).collect();
        let client = redis::cluster::ClusterClient::new(nodes).unwrap();
        Box::new(client.get_connection().unwrap())
    }

    /// A key prefix of the case's own; its keys are deleted at the end.
    struct Keys {
        fence: RedisFence,
        connect: fn() -> Box<dyn ConnectionLike + Send>,
        used: std::sync::Mutex<Vec<String>>,
    }

    impl Keys {
        fn new(connect: fn() -> Box<dyn ConnectionLike + Send>) -> Self {
            Keys {
                fence: RedisFence::new(&stamp()).unwrap(),
                connect,
                used: Default::default(),
            }
        }

        fn store(&self) -> Box<dyn Store + '_> {
            Box::new(Rd(self, (self.connect)()))
        }
    }

    impl Drop for Keys {
        fn drop(&mut self) {
            let mut con = (self.connect)();
            for key in self.used.lock().unwrap().iter() {
                for k in [self.fence.data_key(key), self.fence.token_key(key)] {
                    let _ = redis::cmd("DEL").arg(k.unwrap()).exec(&mut *con);
                }
            }
        }
    }

    struct Rd<'a>(&'a Keys, Box<dyn ConnectionLike + Send>);

    impl Store for Rd<'_> {
        fn put(&mut self, key: &str, token: Token, value: &[u8]) -> Result<(), Error> {
            let mut used = self.0.used.lock().unwrap();
            if !used.iter().any(|k| k == key) {
                used.push(key.to_owned());
            }
            drop(used);
            self.0.fence.put(&mut *self.1, key, token, value)
        }
        fn get(&mut self, key: &str) -> Result<Option<(Token, Vec<u8>)>, Error> {
            self.0.fence.get(&mut *self.1, key).map(pair)
        }
    }

    fn paused(connect: fn() -> Box<dyn ConnectionLike + Send>) {
        let keys = Keys::new(connect);
        paused_former_holder_is_refused(&|| keys.store(), "report");
    }

    fn hammered(connect: fn() -> Box<dyn ConnectionLike + Send>) {
        let keys = Keys::new(connect);
        concurrent_terms_never_interleave(&|| keys.store(), "report");
    }

    #[test]
    fn paused_former_holder_is_refused_redis() {
        paused(standalone);
    }

    #[test]
    fn concurrent_terms_never_interleave_redis() {
        hammered(standalone);
    }

    #[test]
    fn paused_former_holder_is_refused_redis_cluster() {
        paused(cluster);
    }

    #[test]
    fn concurrent_terms_never_interleave_redis_cluster() {
        hammered(cluster);
    }

    /// Tokens compare exactly beyond 2^53 (a Lua number is a double) and the keys are
    /// plain strings readers may `GET`.
    #[test]
    fn tokens_compare_exactly_over_the_whole_u64_range_redis() {
        let keys = Keys::new(standalone);
        let mut store = keys.store();
        let big = (1u64 << 53) + 1; // the double nearest is 2^53
        store.put("k", token(big), b"big").unwrap();
        let e = store.put("k", token(big - 1), b"lower").unwrap_err();
        assert!(matches!(e, Error::StaleToken { newest, .. } if newest == token(big)));
        store.put("k", token(u64::MAX), b"max").unwrap();
        let e = store.put("k", token(u64::MAX - 1), b"lower").unwrap_err();
        assert!(matches!(e, Error::StaleToken { .. }));
        let mut con = standalone();
        let raw: String = redis::cmd("GET")
            .arg(keys.fence.token_key("k").unwrap())
            .query(&mut *con)
            .unwrap();
        assert_eq!(raw, u64::MAX.to_string());
        let data: Vec<u8> = redis::cmd("GET")
            .arg(keys.fence.data_key("k").unwrap())
            .query(&mut *con)
            .unwrap();
        assert_eq!(data, b"max");
    }
}
