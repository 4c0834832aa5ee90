//! Backends and sessions: connecting, the config, opening, closing, state, health, events and
//! callbacks.

use crate::args::{millis, out, put, put_text, text};
use crate::cancel::{cancel_of, deadline};
use crate::handles::{free, get, locked, lookup, register};
use crate::objects::{BackendObj, SessionObj};
use crate::results::{convert, event_call, CALLBACK_EVENTS};
use crate::status::{ffi, Fail, R};
use crate::types::simba_status::*;
use crate::types::{
    simba_backend, simba_cancel, simba_config, simba_event, simba_event_callback, simba_health,
    simba_session, simba_state, simba_status, SimbaConfigV1, CONFIG_SIZE, CONFIG_V1_SIZE,
};
use lease::spi::LeaseBackend;
use lease::{Config, Session, SessionState};
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};
use std::time::Duration;
// Named only by the documentation's links.
#[cfg(doc)]
use crate::{lock::simba_session_lock, results::simba_event_free};

/// Connects to a backend by URL (`memory://`, `postgres://…`, `mysql://…`, `redis://…`,
/// `zookeeper://…`; NUL-terminated UTF-8). Backends not built into this library give
/// `SIMBA_FEATURE_DISABLED`. `*out_backend` is the new handle.
#[no_mangle]
pub unsafe extern "C" fn simba_connect(
    url: *const c_char,
    out_backend: *mut *mut simba_backend,
) -> simba_status {
    ffi(|| {
        let o = out(out_backend, "out_backend")?;
        put(o, std::ptr::null_mut());
        let url = text(url, "url")?;
        let backend = lease::connect(url)?;
        put(o, register(BackendObj(backend))?);
        Ok(())
    })
}

/// Frees a backend handle. Sessions opened on it keep the connection until they end.
#[no_mangle]
pub unsafe extern "C" fn simba_backend_free(backend: *mut simba_backend) -> simba_status {
    ffi(|| free::<BackendObj, _>(backend))
}

/// Fills `*config` with the defaults (lease 15000 ms, renew 5000 ms, drift 0.01, reopen on
/// expiry, no metadata, no fair locks, no lock-delay) and sets `config->struct_size` to `struct_size`,
/// which must be `sizeof *config` as the caller's header has it: only the fields that lie
/// wholly within it are written. A `struct_size` outside the sizes this library knows (see
/// [`simba_config`]) gives `SIMBA_INVALID_ARGUMENT` and writes nothing.
#[no_mangle]
pub unsafe extern "C" fn simba_config_default(
    config: *mut simba_config,
    struct_size: usize,
) -> simba_status {
    ffi(|| {
        let o = out(config, "config")?;
        check_config_size(struct_size)?;
        let d = Config::default();
        // SAFETY: the caller's struct is `struct_size` bytes (at least the first version).
        unsafe {
            o.cast::<SimbaConfigV1>().write(SimbaConfigV1 {
                struct_size,
                lease_ms: millis(d.lease()),
                renew_interval_ms: millis(d.renew_interval()),
                drift: d.drift(),
                reopen_on_expiry: u8::from(d.reopen_on_expiry()),
                metadata: std::ptr::null(),
            });
            if struct_size >= FAIR_LOCKS_END {
                o.cast::<u8>()
                    .add(FAIR_LOCKS_AT)
                    .write(u8::from(d.fair_locks()));
            }
            if struct_size >= LOCK_DELAY_END {
                o.cast::<u8>()
                    .add(LOCK_DELAY_AT)
                    .cast::<u64>()
                    .write_unaligned(millis(d.lock_delay()));
            }
        }
        Ok(())
    })
}

/// Where `fair_locks` (the second version's field) starts and ends in `simba_config`: it is
/// read or written only when `struct_size` covers it wholly.
const FAIR_LOCKS_AT: usize = std::mem::offset_of!(simba_config, fair_locks);
const FAIR_LOCKS_END: usize = FAIR_LOCKS_AT + std::mem::size_of::<u8>();
/// Where `lock_delay_ms` (the third version's field) starts and ends.
const LOCK_DELAY_AT: usize = std::mem::offset_of!(simba_config, lock_delay_ms);
const LOCK_DELAY_END: usize = LOCK_DELAY_AT + std::mem::size_of::<u64>();

fn check_config_size(struct_size: usize) -> R {
    if (CONFIG_V1_SIZE..=CONFIG_SIZE).contains(&struct_size) {
        return Ok(());
    }
    Err(Fail::new(
        SIMBA_INVALID_ARGUMENT,
        format!(
            "config.struct_size is {struct_size}; this library knows sizes {CONFIG_V1_SIZE} (the \
             first version) to {CONFIG_SIZE}: fill the config with simba_config_default first"
        ),
    ))
}

fn flag(value: u8, what: &str) -> R<bool> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(Fail::new(
            SIMBA_INVALID_ARGUMENT,
            format!("config.{what} is {v}; it must be 0 or 1"),
        )),
    }
}

fn build_config(config: *const simba_config) -> R<Config> {
    if config.is_null() {
        return Ok(Config::default());
    }
    // SAFETY: the C contract: a readable simba_config of at least its first version, whose
    // first field is its size; only the fields within that size are read.
    let struct_size = unsafe { config.cast::<usize>().read() };
    check_config_size(struct_size)?;
    let c = unsafe { config.cast::<SimbaConfigV1>().read() };
    let fair_locks = if struct_size >= FAIR_LOCKS_END {
        unsafe { config.cast::<u8>().add(FAIR_LOCKS_AT).read() }
    } else {
        u8::from(Config::default().fair_locks())
    };
    let lock_delay = if struct_size >= LOCK_DELAY_END {
        let ms = unsafe {
            config
                .cast::<u8>()
                .add(LOCK_DELAY_AT)
                .cast::<u64>()
                .read_unaligned()
        };
        Duration::from_millis(ms)
    } else {
        Config::default().lock_delay()
    };
    let mut b = Config::builder()
        .lease(Duration::from_millis(c.lease_ms))
        .renew_interval(Duration::from_millis(c.renew_interval_ms))
        .drift(c.drift)
        .reopen_on_expiry(flag(c.reopen_on_expiry, "reopen_on_expiry")?)
        .fair_locks(flag(fair_locks, "fair_locks")?)
        .lock_delay(lock_delay);
    if !c.metadata.is_null() {
        b = b.metadata(text(c.metadata, "config.metadata")?);
    }
    Ok(b.build()?)
}

fn open_session(backend: Arc<dyn LeaseBackend>, config: *const simba_config) -> R<Session> {
    let config = build_config(config)?;
    Ok(Session::open(backend, config)?)
}

/// Opens a session on `backend` (one backend call) with `config` (NULL: the defaults).
/// `*out_session` is the new handle.
#[no_mangle]
pub unsafe extern "C" fn simba_session_open(
    backend: *const simba_backend,
    config: *const simba_config,
    out_session: *mut *mut simba_session,
) -> simba_status {
    ffi(|| {
        let o = out(out_session, "out_session")?;
        put(o, std::ptr::null_mut());
        let backend = get::<BackendObj, _>(backend)?.0.clone();
        let session = open_session(backend, config)?;
        put(o, register(session_obj(session))?);
        Ok(())
    })
}

fn session_obj(session: Session) -> SessionObj {
    SessionObj {
        session,
        events: Mutex::new(None),
    }
}

/// Connects to `url` (NUL-terminated UTF-8) and opens a session with `config` (NULL: the
/// defaults): [`simba_connect`] and [`simba_session_open`] in one call.
#[no_mangle]
pub unsafe extern "C" fn simba_session_connect(
    url: *const c_char,
    config: *const simba_config,
    out_session: *mut *mut simba_session,
) -> simba_status {
    ffi(|| {
        let o = out(out_session, "out_session")?;
        put(o, std::ptr::null_mut());
        let backend = lease::connect(text(url, "url")?)?;
        let session = open_session(backend, config)?;
        put(o, register(session_obj(session))?);
        Ok(())
    })
}

/// Closes the session: ends every term (events `LOCK_LOST`/`REVOKED` with reason `CLOSED`,
/// then `CLOSED`), deletes the backend session and waits until the final events were
/// delivered, so no callback of this session runs after it returns. Idempotent. The handle
/// stays allocated: free it with [`simba_session_free`]. Must not be called from inside one
/// of this session's event callbacks, and hangs while a callback of this session blocks.
/// Handles made from the session stay allocated (free each); from now on their calls that
/// need the session give `SIMBA_CLOSED`, locks are no longer valid, a thread blocked in
/// [`simba_session_lock`] returns `SIMBA_CLOSED`, and every event queue gives its remaining
/// events, then `SIMBA_CLOSED`.
/// Bounded by the URL's time limits (one backend call).
#[no_mangle]
pub unsafe extern "C" fn simba_session_close(session: *const simba_session) -> simba_status {
    ffi(|| Ok(get::<SessionObj, _>(session)?.session.close()?))
}

/// Closes the session like [`simba_session_close`] (ignoring a backend failure of the
/// close: the backend session then expires on its own) and frees the handle. It does not
/// free the handles made from the session: they stay allocated until their own `*_free` and
/// behave as after [`simba_session_close`] (`SIMBA_CLOSED`, locks no longer valid; a lock's
/// token and name stay readable). Like close, it waits for the final events (a callback
/// that blocks hangs it) and must not be called from this session's callbacks.
#[no_mangle]
pub unsafe extern "C" fn simba_session_free(session: *mut simba_session) -> simba_status {
    ffi(|| {
        let s = lookup::<SessionObj, _>(session, true)?;
        let _ = s.session.close();
        Ok(())
    })
}

/// Writes the session's current backend id (16 or 32 hex digits, NUL-terminated) into
/// `buf` of `buf_len` bytes (at least `SIMBA_SESSION_ID_LEN`).
#[no_mangle]
pub unsafe extern "C" fn simba_session_id(
    session: *const simba_session,
    buf: *mut c_char,
    buf_len: usize,
) -> simba_status {
    ffi(|| {
        let buf = out(buf, "buf")?;
        let id = get::<SessionObj, _>(session)?.session.id();
        put_text(id.as_str(), buf, buf_len)
    })
}

/// The session's state now.
#[no_mangle]
pub unsafe extern "C" fn simba_session_state(
    session: *const simba_session,
    out_state: *mut simba_state,
) -> simba_status {
    use simba_state::*;
    ffi(|| {
        let o = out(out_state, "out_state")?;
        let state = match get::<SessionObj, _>(session)?.session.state() {
            SessionState::Valid => SIMBA_STATE_VALID,
            SessionState::Jeopardy => SIMBA_STATE_JEOPARDY,
            SessionState::Expired => SIMBA_STATE_EXPIRED,
            SessionState::Closed => SIMBA_STATE_CLOSED,
        };
        put(o, state);
        Ok(())
    })
}

/// The session's lease health now.
#[no_mangle]
pub unsafe extern "C" fn simba_session_health(
    session: *const simba_session,
    out_health: *mut simba_health,
) -> simba_status {
    ffi(|| {
        let o = out(out_health, "out_health")?;
        let h = get::<SessionObj, _>(session)?.session.health();
        let opt = |d: Option<Duration>, f: fn(Duration) -> u128| {
            d.map_or(-1, |d| i64::try_from(f(d)).unwrap_or(i64::MAX))
        };
        put(
            o,
            simba_health {
                valid_for_ms: millis(h.valid_for),
                keep_alive_rtt_us: opt(h.keep_alive_rtt, |d| d.as_micros()),
                slack_ms: opt(h.slack, |d| d.as_millis()),
                failures: h.failures,
            },
        );
        Ok(())
    })
}

/// Waits until the session is valid or `timeout_ms` passes (`SIMBA_TIMEOUT`); fails at
/// once if it closed or expired for good.
#[no_mangle]
pub unsafe extern "C" fn simba_session_wait_valid(
    session: *const simba_session,
    timeout_ms: u64,
) -> simba_status {
    ffi(|| {
        let s = get::<SessionObj, _>(session)?;
        Ok(s.session.wait_valid(Duration::from_millis(timeout_ms))?)
    })
}

/// Waits until the session is valid, `timeout_ms` passes (`SIMBA_TIMEOUT`; `SIMBA_FOREVER`:
/// no limit) or `cancel` is fired by any thread (`SIMBA_CANCELLED`, at once if it was fired
/// before the call); fails at once if it closed or expired for good. `cancel` NULL gives
/// `SIMBA_NULL_ARGUMENT` (use [`simba_session_wait_valid`] for no token).
#[no_mangle]
pub unsafe extern "C" fn simba_session_wait_valid_cancellable(
    session: *const simba_session,
    timeout_ms: u64,
    cancel: *const simba_cancel,
) -> simba_status {
    ffi(|| {
        let s = get::<SessionObj, _>(session)?;
        let cancel = cancel_of(cancel)?;
        Ok(s.session
            .wait_valid_cancellable(deadline(timeout_ms), &cancel)?)
    })
}

/// Waits up to `timeout_ms` for the next event of this session and all its handles, in
/// order; `*out_event` is then an event to free with [`simba_event_free`]. `SIMBA_TIMEOUT`
/// if none came, `SIMBA_CLOSED` once the session is closed and its events are read.
///
/// The queue starts at the first call of this function on the session (call it once with
/// timeout 0 right after opening to receive every event); several threads calling it share
/// one queue (each event goes to one of them). From then on the queue is unbounded: read it
/// (or do not start it), else events accumulate until the session is freed.
#[no_mangle]
pub unsafe extern "C" fn simba_session_next_event(
    session: *const simba_session,
    timeout_ms: u64,
    out_event: *mut *mut simba_event,
) -> simba_status {
    event_call(out_event, timeout_ms, || {
        let s = get::<SessionObj, _>(session)?;
        let rx = locked(&s.events)
            .get_or_insert_with(|| s.session.events())
            .clone();
        Ok(rx)
    })
}

/// `void *` that the caller promises may be used from the event thread.
struct UserData(*mut c_void);
// SAFETY: the C contract of simba_session_on_event: user_data may be used from another thread.
unsafe impl Send for UserData {}

/// Registers `callback`, called with every event of this session and its handles from now
/// on, in order, with `user_data` (may be NULL).
///
/// **Thread:** callbacks run on one of the library's event threads (a shared pool; one
/// event at a time per session, never on the thread that registered it), never under an
/// internal lock. The `simba_event` is valid only during the call (copy what you keep).
/// A callback may call any function of this library except [`simba_session_close`] and
/// [`simba_session_free`] of its own session. `user_data` must stay valid, and usable from
/// that thread, until [`simba_session_close`] or [`simba_session_free`] of the session
/// returned. A callback cannot be removed; registering another adds it.
///
/// A callback must return normally: no C++ exception and no `longjmp` may leave it
/// (undefined behaviour across the library's frames; catch exceptions inside it). Close and
/// free wait until the session's final events were delivered, so a callback that blocks
/// (or waits for the thread that closes) makes them hang.
#[no_mangle]
pub unsafe extern "C" fn simba_session_on_event(
    session: *const simba_session,
    callback: simba_event_callback,
    user_data: *mut c_void,
) -> simba_status {
    ffi(|| {
        let s = get::<SessionObj, _>(session)?;
        let Some(cb) = callback else {
            return Err(Fail::new(SIMBA_NULL_ARGUMENT, "the callback is NULL"));
        };
        let data = UserData(user_data);
        s.session.on_event(move |event| {
            let data = &data;
            let e = convert(event);
            // A pointer to the whole box (`#[repr(C)]`, `c` first), so that
            // `simba_event_value` may read the box's other fields through it.
            let p = std::ptr::addr_of!(e).cast::<simba_event>();
            let key = p as usize;
            CALLBACK_EVENTS.with(|c| c.borrow_mut().push(key));
            // Off the list again however the call ends.
            struct Done(usize);
            impl Drop for Done {
                fn drop(&mut self) {
                    let _ = CALLBACK_EVENTS.try_with(|c| c.borrow_mut().retain(|k| *k != self.0));
                }
            }
            let _done = Done(key);
            // SAFETY: the C contract of the callback; `e` outlives the call.
            unsafe { cb(p, data.0) };
        });
        Ok(())
    })
}

/// Deletes this session's backend session behind the engine's back, as an operator, a
/// failover or a long partition would: the engine finds out at its next keep-alive, reports
/// every lock lost (`LOCK_LOST`, reason `SESSION_EXPIRED`), `SESSION_EXPIRED`, and (with
/// `reopen_on_expiry`) opens a new backend session. For tests and demonstrations of loss
/// handling; one backend call.
#[no_mangle]
pub unsafe extern "C" fn simba_session_sever(session: *const simba_session) -> simba_status {
    ffi(|| {
        let s = get::<SessionObj, _>(session)?;
        Ok(s.session.backend().close_session(&s.session.id())?)
    })
}
