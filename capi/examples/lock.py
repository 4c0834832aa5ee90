#!/usr/bin/env python3
"""A lock with its fencing token, and the event when it is lost, through the C ABI with
ctypes (standard library only).

    cargo build -p simba-lease-capi [--features redis]
    python3 capi/examples/lock.py target/debug/libsimba_lease_c.so memory://

The same steps as lock.c: take the lock "ledger" and write with its token; cut the session
off behind the library's back (simba_session_sever); the library reports the loss (a
callback on its event thread, and the lock's event queue); the old token is refused; after
the session is reopened the lock is taken again with a higher token; a read-write lock gives
a read term, then a write term with a higher token (skipped, with the reason printed, on a
backend without read-write locks). Exits non-zero on any unexpected result.
"""
import ctypes as C
import sys
import threading

SIMBA_OK, SIMBA_INVALID_HANDLE, SIMBA_LEASE_LOST, SIMBA_UNSUPPORTED = 0, 4, 9, 21
SIMBA_RW_READ, SIMBA_RW_WRITE = 0, 1
SIMBA_EVENT_LOCK_LOST = 7
SIMBA_LOSS_SESSION_EXPIRED = 1
SESSION_ID_LEN, NAME_LEN = 33, 129
KINDS = ["JEOPARDY", "RECOVERED", "SESSION_EXPIRED", "SESSION_REOPENED", "CLOSED",
         "ELECTED", "REVOKED", "LOCK_LOST", "LEADER_CHANGED", "MEMBERS_CHANGED", "OTHER",
         "TOKEN_REGRESSED"]


class Config(C.Structure):
    # Mirrors simba_config exactly; struct_size is set by simba_config_default.
    _fields_ = [("struct_size", C.c_size_t), ("lease_ms", C.c_uint64),
                ("renew_interval_ms", C.c_uint64), ("drift", C.c_double),
                ("reopen_on_expiry", C.c_uint8), ("metadata", C.c_char_p),
                ("fair_locks", C.c_uint8), ("lock_delay_ms", C.c_uint64)]


class Member(C.Structure):
    _fields_ = [("session", C.c_char * SESSION_ID_LEN), ("metadata", C.c_char_p),
                ("metadata_len", C.c_size_t)]


class MemberList(C.Structure):
    _fields_ = [("items", C.POINTER(Member)), ("len", C.c_size_t)]


class Event(C.Structure):
    _fields_ = [("kind", C.c_int), ("reason", C.c_int),
                ("session", C.c_char * SESSION_ID_LEN),
                ("new_session", C.c_char * SESSION_ID_LEN),
                ("name", C.c_char * NAME_LEN), ("token", C.c_uint64),
                ("remaining_ms", C.c_uint64), ("members", MemberList),
                ("joined", MemberList), ("left", MemberList)]


CALLBACK = C.CFUNCTYPE(None, C.POINTER(Event), C.c_void_p)


class SimbaError(Exception):
    pass


def expect(ok, what):
    """An explicit check (not `assert`, which `python -O` strips): exits 1 if not `ok`."""
    if not ok:
        print("lock.py failed: %s" % (what,), file=sys.stderr)
        sys.exit(1)


def load(path):
    lib = C.CDLL(path)
    handle = C.c_void_p
    sigs = {
        "simba_last_error": ([], C.c_char_p),
        "simba_status_name": ([C.c_int], C.c_char_p),
        "simba_config_default": ([C.POINTER(Config), C.c_size_t], C.c_int),
        "simba_session_connect": ([C.c_char_p, C.POINTER(Config), C.POINTER(handle)], C.c_int),
        "simba_session_id": ([handle, C.c_char_p, C.c_size_t], C.c_int),
        "simba_session_on_event": ([handle, CALLBACK, C.c_void_p], C.c_int),
        "simba_session_sever": ([handle], C.c_int),
        "simba_session_close": ([handle], C.c_int),
        "simba_session_free": ([handle], C.c_int),
        "simba_session_lock_timeout": ([handle, C.c_char_p, C.c_uint64, C.POINTER(handle)],
                                       C.c_int),
        "simba_lock_check": ([handle, C.POINTER(C.c_uint64)], C.c_int),
        "simba_lock_is_valid": ([handle, C.POINTER(C.c_bool)], C.c_int),
        "simba_lock_next_event": ([handle, C.c_uint64, C.POINTER(C.POINTER(Event))], C.c_int),
        "simba_lock_unlock": ([handle], C.c_int),
        "simba_lock_free": ([handle], C.c_int),
        "simba_event_free": ([C.POINTER(Event)], C.c_int),
        "simba_session_rw_lock": ([handle, C.c_char_p, C.POINTER(handle)], C.c_int),
        "simba_rw_lock_read_timeout": ([handle, C.c_uint64, C.POINTER(handle)], C.c_int),
        "simba_rw_lock_write_timeout": ([handle, C.c_uint64, C.POINTER(handle)], C.c_int),
        "simba_rw_lock_free": ([handle], C.c_int),
        "simba_rw_guard_check": ([handle, C.POINTER(C.c_uint64)], C.c_int),
        "simba_rw_guard_mode": ([handle, C.POINTER(C.c_int)], C.c_int),
        "simba_rw_guard_unlock": ([handle], C.c_int),
        "simba_rw_guard_free": ([handle], C.c_int),
    }
    for name, (args, res) in sigs.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    return lib


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: lock.py path/to/libsimba_lease_c.so [url]")
    lib = load(sys.argv[1])
    url = sys.argv[2] if len(sys.argv) > 2 else "memory://"

    def check(status, what):
        if status != SIMBA_OK:
            raise SimbaError("%s: %s: %s" % (what, lib.simba_status_name(status).decode(),
                                             lib.simba_last_error().decode()))

    highest = [0]

    def fenced_write(token, what):
        if token < highest[0]:
            print("store: rejected stale token %d (%s)" % (token, what))
            return False
        highest[0] = token
        print("store: accepted write with token %d (%s)" % (token, what))
        return True

    config = Config()
    # Always first: sets struct_size (our sizeof) and the defaults of every field we know.
    check(lib.simba_config_default(C.byref(config), C.sizeof(config)), "config")
    config.lease_ms, config.renew_interval_ms, config.metadata = 2000, 200, b"lock.py"
    config.reopen_on_expiry = 1  # 0 or 1 (a uint8_t); the default, set here to show it
    config.fair_locks = 0  # 0 (the default) or 1: locks in arrival order
    config.lock_delay_ms = 0  # 0 (the default): a crashed holder's name is free a lease later
    session = C.c_void_p()
    check(lib.simba_session_connect(url.encode(), C.byref(config), C.byref(session)),
          "connect")
    buf = C.create_string_buffer(SESSION_ID_LEN)
    check(lib.simba_session_id(session, buf, len(buf)), "session id")
    print("session %s on %s" % (buf.value.decode(), url))

    losses = []
    lost = threading.Event()

    def on_event(event, _user_data):
        # Runs on the library's event thread (ctypes takes the GIL); copy what you keep.
        e = event.contents
        print("callback (event thread %s): %s name=%s token=%d reason=%d" % (
            threading.current_thread().name, KINDS[min(e.kind, 10)], e.name.decode(),
            e.token, e.reason))
        if e.kind == SIMBA_EVENT_LOCK_LOST:
            losses.append(e.token)
            lost.set()

    callback = CALLBACK(on_event)  # must outlive the session: kept in this frame
    check(lib.simba_session_on_event(session, callback, None), "on_event")

    lock = C.c_void_p()
    check(lib.simba_session_lock_timeout(session, b"ledger", 10000, C.byref(lock)), "lock")
    token = C.c_uint64()
    check(lib.simba_lock_check(lock, C.byref(token)), "check")
    expect(fenced_write(token.value, "while holding the lock"), "the first write was refused")

    check(lib.simba_session_sever(session), "sever")
    event = C.POINTER(Event)()
    check(lib.simba_lock_next_event(lock, 10000, C.byref(event)), "next event")
    e = event.contents
    print("lock event: %s token=%d reason=%d" % (KINDS[e.kind], e.token, e.reason))
    expect(e.kind == SIMBA_EVENT_LOCK_LOST and e.token == token.value,
           "expected LOCK_LOST of token %d" % token.value)
    expect(e.reason == SIMBA_LOSS_SESSION_EXPIRED, "expected reason SESSION_EXPIRED")
    check(lib.simba_event_free(event), "event free")
    expect(lost.wait(10), "the callback did not see the loss within 10 s")

    valid = C.c_bool(True)
    check(lib.simba_lock_is_valid(lock, C.byref(valid)), "is_valid")
    expect(not valid.value, "the lock is still valid after its loss")
    unused = C.c_uint64()
    status = lib.simba_lock_check(lock, C.byref(unused))
    print("check after the loss: %s (%s)" % (lib.simba_status_name(status).decode(),
                                            lib.simba_last_error().decode()))
    expect(status == SIMBA_LEASE_LOST, "check after the loss did not give SIMBA_LEASE_LOST")
    check(lib.simba_lock_free(lock), "free")

    lock2 = C.c_void_p()
    check(lib.simba_session_lock_timeout(session, b"ledger", 10000, C.byref(lock2)),
          "lock again")
    token2 = C.c_uint64()
    check(lib.simba_lock_check(lock2, C.byref(token2)), "check")
    expect(token2.value > token.value,
           "the new token %d is not above %d" % (token2.value, token.value))
    expect(fenced_write(token2.value, "after taking the lock again"),
           "the write with the new token was refused")
    expect(not fenced_write(token.value, "a late write with the lost token"),
           "the write with the lost token was accepted")
    check(lib.simba_lock_unlock(lock2), "unlock")
    check(lib.simba_lock_free(lock2), "free")

    # A read-write lock: a read term, then a write term with a higher token.
    catalog, guard = C.c_void_p(), C.c_void_p()
    check(lib.simba_session_rw_lock(session, b"catalog", C.byref(catalog)), "rw lock")
    status = lib.simba_rw_lock_read_timeout(catalog, 10000, C.byref(guard))
    if status == SIMBA_UNSUPPORTED:
        print("read-write locks: %s" % lib.simba_last_error().decode())
    else:
        check(status, "read")
        read_token, write_token, mode = C.c_uint64(), C.c_uint64(), C.c_int(-1)
        check(lib.simba_rw_guard_check(guard, C.byref(read_token)), "read check")
        check(lib.simba_rw_guard_mode(guard, C.byref(mode)), "mode")
        expect(mode.value == SIMBA_RW_READ, "the read term's mode is %d" % mode.value)
        print("read term of catalog, token %d" % read_token.value)
        check(lib.simba_rw_guard_unlock(guard), "read unlock")
        check(lib.simba_rw_guard_free(guard), "read free")
        check(lib.simba_rw_lock_write_timeout(catalog, 10000, C.byref(guard)), "write")
        check(lib.simba_rw_guard_check(guard, C.byref(write_token)), "write check")
        print("write term of catalog, token %d" % write_token.value)
        expect(write_token.value > read_token.value,
               "the write token %d is not above the read's %d" % (write_token.value,
                                                                 read_token.value))
        check(lib.simba_rw_guard_unlock(guard), "write unlock")
        check(lib.simba_rw_guard_free(guard), "write free")
    check(lib.simba_rw_lock_free(catalog), "rw lock free")

    check(lib.simba_session_close(session), "close")  # no callback runs after this
    check(lib.simba_session_free(session), "free")
    expect(losses == [token.value], "the callback saw the losses %r" % (losses,))
    expect(lib.simba_session_free(session) == SIMBA_INVALID_HANDLE,
           "a second free was not SIMBA_INVALID_HANDLE")
    print("ok: tokens %d then %d, loss reported once" % (token.value, token2.value))


if __name__ == "__main__":
    try:
        main()
    except SimbaError as err:
        print("lock.py failed: %r" % (err,), file=sys.stderr)
        sys.exit(1)
