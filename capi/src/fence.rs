//! Fenced writes: a resource that checks the fencing token where its data lives
//! (`simba_fence`), over a directory (always), a Redis server (feature `redis`), a
//! PostgreSQL table (feature `postgres`) or a MySQL/MariaDB table (feature `mysql`).

use crate::args::{check_value_buf, out, put, put_opt, put_value, text};
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
use crate::handles::locked;
use crate::handles::{free, get, register, Kind};
use crate::status::{ffi, Fail, R};
use crate::types::simba_status::*;
use crate::types::{simba_fence, simba_status};
use lease::fence::{Fenced, FileFence};
use lease::Token;
use std::ffi::{c_char, c_void};
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
use std::sync::Mutex;
// Named only by the documentation's links.
#[cfg(doc)]
use crate::lock::simba_lock_token;

/// The fence behind a `simba_fence` handle.
enum FenceObj {
    File(FileFence),
    /// The connection is used by one call at a time.
    #[cfg(feature = "redis")]
    Redis {
        fence: lease::fence::RedisFence,
        con: Mutex<redis::Connection>,
    },
    #[cfg(feature = "postgres")]
    Postgres {
        fence: lease::fence::PostgresFence,
        client: Mutex<postgres::Client>,
    },
    #[cfg(feature = "mysql")]
    Mysql {
        fence: lease::fence::MysqlFence,
        conn: Mutex<mysql::Conn>,
    },
}

impl Kind for FenceObj {
    const NAME: &'static str = "simba_fence";
}

impl FenceObj {
    fn put(&self, key: &str, token: Token, value: &[u8]) -> lease::Result<()> {
        match self {
            FenceObj::File(f) => f.put(key, token, value),
            #[cfg(feature = "redis")]
            FenceObj::Redis { fence, con } => fence.put(&mut *locked(con), key, token, value),
            #[cfg(feature = "postgres")]
            FenceObj::Postgres { fence, client } => {
                fence.put(&mut *locked(client), key, token, value)
            }
            #[cfg(feature = "mysql")]
            FenceObj::Mysql { fence, conn } => fence.put(&mut *locked(conn), key, token, value),
        }
    }

    fn get(&self, key: &str) -> lease::Result<Option<Fenced>> {
        match self {
            FenceObj::File(f) => f.get(key),
            #[cfg(feature = "redis")]
            FenceObj::Redis { fence, con } => fence.get(&mut *locked(con), key),
            #[cfg(feature = "postgres")]
            FenceObj::Postgres { fence, client } => fence.get(&mut *locked(client), key),
            #[cfg(feature = "mysql")]
            FenceObj::Mysql { fence, conn } => fence.get(&mut *locked(conn), key),
        }
    }

    /// Creates an SQL fence's table if it does not exist; nothing for the others.
    fn install(&self) -> lease::Result<()> {
        match self {
            FenceObj::File(_) => Ok(()),
            #[cfg(feature = "redis")]
            FenceObj::Redis { .. } => Ok(()),
            #[cfg(feature = "postgres")]
            FenceObj::Postgres { fence, client } => fence.install(&mut *locked(client)),
            #[cfg(feature = "mysql")]
            FenceObj::Mysql { fence, conn } => fence.install(&mut *locked(conn)),
        }
    }
}

/// A fence on the directory `dir` (NUL-terminated UTF-8; created by the first write): per
/// key a directory `<dir>/<key>/` with one file per token, written to a temporary file and
/// renamed into place, the highest version being the value (the library's
/// `simba_lease::fence::FileFence`, whose documentation states what it guarantees on local
/// and network file systems). No I/O until the first call. `*out_fence` is the new handle.
#[no_mangle]
pub unsafe extern "C" fn simba_fence_file(
    dir: *const c_char,
    out_fence: *mut *mut simba_fence,
) -> simba_status {
    ffi(|| {
        let o = out(out_fence, "out_fence")?;
        put(o, std::ptr::null_mut());
        let dir = text(dir, "dir")?;
        if dir.is_empty() {
            return Err(Fail::new(
                SIMBA_INVALID_ARGUMENT,
                "the fence directory is empty",
            ));
        }
        put(o, register(FenceObj::File(FileFence::new(dir)))?);
        Ok(())
    })
}

/// A fence on one Redis server (`url`: a plain `redis://` URL as the `redis` crate reads it,
/// e.g. `redis://127.0.0.1:6379/0`, without the library's own options such as `prefix`;
/// NUL-terminated UTF-8; no TLS, no Cluster): per key a token
/// key `<prefix>{<key>}:token` and a data key `<prefix>{<key>}` (readers may `GET` it),
/// written together by one script that compares the tokens (the library's
/// `simba_lease::fence::RedisFence`). `prefix` (NUL-terminated UTF-8, may be empty) must not
/// contain `{` or `}` (`SIMBA_INVALID_ARGUMENT`). Connects now (one connection, used by one
/// call at a time); the keys never expire, so the server must not evict them. Built
/// without the feature `redis`: `SIMBA_FEATURE_DISABLED`. `*out_fence` is the new handle.
#[no_mangle]
pub unsafe extern "C" fn simba_fence_redis(
    url: *const c_char,
    prefix: *const c_char,
    out_fence: *mut *mut simba_fence,
) -> simba_status {
    ffi(|| {
        let o = out(out_fence, "out_fence")?;
        put(o, std::ptr::null_mut());
        let url = text(url, "url")?;
        let prefix = text(prefix, "prefix")?;
        put(o, register(redis_fence(url, prefix)?)?);
        Ok(())
    })
}

#[cfg(feature = "redis")]
fn redis_fence(url: &str, prefix: &str) -> R<FenceObj> {
    let fence = lease::fence::RedisFence::new(prefix)?;
    let connect = || redis::Client::open(url)?.get_connection();
    // The driver's message, never the URL (it may hold a password).
    let con =
        connect().map_err(|e| Fail::from(lease::Error::backend("connecting a Redis fence", e)))?;
    Ok(FenceObj::Redis {
        fence,
        con: Mutex::new(con),
    })
}

#[cfg(not(feature = "redis"))]
fn redis_fence(_url: &str, _prefix: &str) -> R<FenceObj> {
    Err(Fail::new(
        SIMBA_FEATURE_DISABLED,
        "this library was built without the feature `redis`: no Redis fence",
    ))
}

/// A fence on the PostgreSQL table `table` (an unquoted identifier, optionally
/// `schema.table`; else `SIMBA_INVALID_ARGUMENT`): one row per key with its newest token and
/// value, each write one statement that raises the row's token and returns the newest (the
/// library's `simba_lease::fence::PostgresFence`). `url` is a connection URL or string as
/// the `postgres` crate reads it (`postgres://user:password@host:5432/db`, without the
/// library's own options such as `table_prefix`), connected now without TLS (one
/// connection, used by one call at a time, each write committed on its own). Create the
/// table with [`simba_fence_install`] (or the library's `PostgresFence::create_table_sql`).
/// Built without the feature `postgres`: `SIMBA_FEATURE_DISABLED`. `*out_fence` is the new
/// handle.
#[no_mangle]
pub unsafe extern "C" fn simba_fence_postgres(
    url: *const c_char,
    table: *const c_char,
    out_fence: *mut *mut simba_fence,
) -> simba_status {
    ffi(|| {
        let o = out(out_fence, "out_fence")?;
        put(o, std::ptr::null_mut());
        let url = text(url, "url")?;
        let table = text(table, "table")?;
        put(o, register(postgres_fence(url, table)?)?);
        Ok(())
    })
}

#[cfg(feature = "postgres")]
fn postgres_fence(url: &str, table: &str) -> R<FenceObj> {
    let fence = lease::fence::PostgresFence::new(table)?;
    let client = postgres::Client::connect(url, postgres::NoTls).map_err(|e| {
        // The driver's message, never the URL (it may hold a password).
        Fail::from(lease::Error::backend("connecting a PostgreSQL fence", e))
    })?;
    Ok(FenceObj::Postgres {
        fence,
        client: Mutex::new(client),
    })
}

#[cfg(not(feature = "postgres"))]
fn postgres_fence(_url: &str, _table: &str) -> R<FenceObj> {
    Err(Fail::new(
        SIMBA_FEATURE_DISABLED,
        "this library was built without the feature `postgres`: no PostgreSQL fence",
    ))
}

/// A fence on the MySQL 8 or MariaDB table `table` (an unquoted identifier, optionally
/// `db.table`; else `SIMBA_INVALID_ARGUMENT`), as [`simba_fence_postgres`] on PostgreSQL
/// (the library's `simba_lease::fence::MysqlFence`). `url` is a URL as the `mysql` crate
/// reads it (`mysql://user:password@host:3306/db`, without the library's own options),
/// connected now without TLS. Create the table with [`simba_fence_install`]. Built without
/// the feature `mysql`: `SIMBA_FEATURE_DISABLED`. `*out_fence` is the new handle.
#[no_mangle]
pub unsafe extern "C" fn simba_fence_mysql(
    url: *const c_char,
    table: *const c_char,
    out_fence: *mut *mut simba_fence,
) -> simba_status {
    ffi(|| {
        let o = out(out_fence, "out_fence")?;
        put(o, std::ptr::null_mut());
        let url = text(url, "url")?;
        let table = text(table, "table")?;
        put(o, register(mysql_fence(url, table)?)?);
        Ok(())
    })
}

#[cfg(feature = "mysql")]
fn mysql_fence(url: &str, table: &str) -> R<FenceObj> {
    let fence = lease::fence::MysqlFence::new(table)?;
    // The driver's message, never the URL (it may hold a password).
    let fail = |e: mysql::Error| Fail::from(lease::Error::backend("connecting a MySQL fence", e));
    let opts = mysql::Opts::from_url(url).map_err(|e| fail(e.into()))?;
    let conn = mysql::Conn::new(opts).map_err(fail)?;
    Ok(FenceObj::Mysql {
        fence,
        conn: Mutex::new(conn),
    })
}

#[cfg(not(feature = "mysql"))]
fn mysql_fence(_url: &str, _table: &str) -> R<FenceObj> {
    Err(Fail::new(
        SIMBA_FEATURE_DISABLED,
        "this library was built without the feature `mysql`: no MySQL fence",
    ))
}

/// Creates the table of an SQL fence ([`simba_fence_postgres`], [`simba_fence_mysql`]) if
/// it does not exist (one statement, `create table if not exists`); nothing for a file or
/// Redis fence.
#[no_mangle]
pub unsafe extern "C" fn simba_fence_install(fence: *const simba_fence) -> simba_status {
    ffi(|| Ok(get::<FenceObj, _>(fence)?.install()?))
}

/// A fenced value's bytes: `len` bytes at `p` (NULL allowed when `len` is 0).
fn bytes_arg<'a>(p: *const c_void, len: usize) -> R<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::new(
            SIMBA_NULL_ARGUMENT,
            format!("the value is NULL but value_len is {len}"),
        ));
    }
    // SAFETY: the C contract: `len` readable bytes, valid for the call.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

fn token_arg(token: u64) -> R<Token> {
    Ok(Token::new(token)?)
}

/// Writes `value_len` bytes at `value` (any bytes; NULL allowed when `value_len` is 0) under
/// `key` (NUL-terminated; the naming rule of lease names, else `SIMBA_INVALID_ARGUMENT`) if
/// `token` (a term's fencing token, e.g. [`simba_lock_token`]; 0 is refused) is not below
/// the newest token recorded for the key, and records `token`: `SIMBA_OK` when applied,
/// `SIMBA_STALE_TOKEN` when refused because a newer term wrote (nothing changed: stop
/// writing with that token, and take the lock again for a new one), `SIMBA_BACKEND` when
/// the resource could not be reached. Equal tokens pass (the holder's own re-writes).
#[no_mangle]
pub unsafe extern "C" fn simba_fence_put(
    fence: *const simba_fence,
    key: *const c_char,
    token: u64,
    value: *const c_void,
    value_len: usize,
) -> simba_status {
    ffi(|| {
        let f = get::<FenceObj, _>(fence)?;
        let key = text(key, "key")?;
        let value = bytes_arg(value, value_len)?;
        Ok(f.put(key, token_arg(token)?, value)?)
    })
}

/// Reads the newest value of `key`: `*out_token` its token (0 and an empty value when nothing
/// was written; `out_token` may be NULL), the bytes copied into `buf` of `buf_len` with a NUL
/// after them and their length (without the NUL) in `*out_value_len` (may be NULL). A
/// buffer too small gives `SIMBA_INVALID_ARGUMENT`, leaves `buf` untouched and writes the
/// length needed (without the NUL) to `*out_value_len`; `buf` NULL with `buf_len` 0 copies
/// nothing (a length query). The value may contain NUL bytes: use the length.
#[no_mangle]
pub unsafe extern "C" fn simba_fence_get(
    fence: *const simba_fence,
    key: *const c_char,
    out_token: *mut u64,
    buf: *mut c_char,
    buf_len: usize,
    out_value_len: *mut usize,
) -> simba_status {
    ffi(|| {
        let f = get::<FenceObj, _>(fence)?;
        let key = text(key, "key")?;
        let (token, value) = match f.get(key)? {
            Some(v) => (v.token.get(), v.value),
            None => (0, Vec::new()),
        };
        check_value_buf(&value, buf, buf_len, out_value_len)?;
        put_value(&value, buf, out_value_len);
        put_opt(out_token, token);
        Ok(())
    })
}

/// Frees the fence handle (and its connection, if it has one).
#[no_mangle]
pub unsafe extern "C" fn simba_fence_free(fence: *mut simba_fence) -> simba_status {
    ffi(|| free::<FenceObj, _>(fence))
}
