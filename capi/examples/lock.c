/*
 * A lock with its fencing token, and the event when it is lost, through the C ABI.
 *
 *   cargo build -p simba-lease-capi [--features redis]
 *   gcc -std=c11 -I capi/include capi/examples/lock.c -L target/debug -lsimba_lease_c \
 *       -Wl,-rpath,target/debug -o lock
 *   ./lock memory://            (or redis://127.0.0.1:6379?prefix=demo)
 *
 * Steps: take the lock "ledger" and write with its token; cut the session off behind the
 * library's back (simba_session_sever: what an operator, a failover or a long partition
 * does); the library reports the loss (a callback on its event thread, and the lock's own
 * event queue); the old token is refused; after the session is reopened the lock is taken
 * again with a higher token, and a file fence (simba_fence_file) refuses the old token's
 * late write with SIMBA_STALE_TOKEN; a permit of a semaphore comes with its own token; a
 * read-write lock gives a read term, then a write term with a higher token (on a backend
 * without read-write locks, SIMBA_UNSUPPORTED is reported and that step skipped). Exits
 * non-zero on any unexpected result.
 */
/* mkdtemp, getpid, unlink, rmdir: POSIX. */
#define _POSIX_C_SOURCE 200809L
#include <simba_lease.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                        \
  do {                                                                                     \
    simba_status st_ = (call);                                                             \
    if (st_ != SIMBA_OK) {                                                                 \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,            \
              simba_status_name((int)st_), simba_last_error());                                 \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

#define EXPECT(cond)                                                                       \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* A resource that accepts a write only with the highest fencing token seen so far. */
static uint64_t highest_token = 0;

static int fenced_write(uint64_t token, const char *what) {
  if (token < highest_token) {
    printf("store: rejected stale token %llu (%s)\n", (unsigned long long)token, what);
    return 0;
  }
  highest_token = token;
  printf("store: accepted write with token %llu (%s)\n", (unsigned long long)token, what);
  return 1;
}

static const char *kind_name(simba_event_kind k) {
  switch (k) {
    case SIMBA_EVENT_JEOPARDY: return "JEOPARDY";
    case SIMBA_EVENT_RECOVERED: return "RECOVERED";
    case SIMBA_EVENT_SESSION_EXPIRED: return "SESSION_EXPIRED";
    case SIMBA_EVENT_SESSION_REOPENED: return "SESSION_REOPENED";
    case SIMBA_EVENT_CLOSED: return "CLOSED";
    case SIMBA_EVENT_ELECTED: return "ELECTED";
    case SIMBA_EVENT_REVOKED: return "REVOKED";
    case SIMBA_EVENT_LOCK_LOST: return "LOCK_LOST";
    case SIMBA_EVENT_LEADER_CHANGED: return "LEADER_CHANGED";
    case SIMBA_EVENT_MEMBERS_CHANGED: return "MEMBERS_CHANGED";
    default: return "OTHER";
  }
}

/* Runs on the library's event thread: keep it short, copy what you keep. */
static void on_event(const simba_event *e, void *user_data) {
  atomic_int *losses = user_data;
  printf("callback (event thread): %s name=%s token=%llu reason=%d\n", kind_name(e->kind),
         e->name, (unsigned long long)e->token, (int)e->reason);
  if (e->kind == SIMBA_EVENT_LOCK_LOST) atomic_fetch_add(losses, 1);
}

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : "memory://";
  simba_config config;
  /* Always first: sets config.struct_size and the defaults of every field this header has. */
  CHECK(simba_config_default(&config, sizeof config));
  config.lease_ms = 2000;
  config.renew_interval_ms = 200;
  config.reopen_on_expiry = 1; /* 0 or 1 (a uint8_t); the default, set here to show it */
  config.metadata = "lock.c";
  config.fair_locks = 0; /* 0 (the default) or 1: locks in arrival order */
  /* 0 (the default): after a crash the name is free one lease later; N: N ms later still. */
  config.lock_delay_ms = 0;

  simba_session *session = NULL;
  CHECK(simba_session_connect(url, &config, &session));
  char id[SIMBA_SESSION_ID_LEN];
  CHECK(simba_session_id(session, id, sizeof id));
  printf("session %s on %s\n", id, url);

  static atomic_int losses = 0;
  CHECK(simba_session_on_event(session, on_event, &losses));

  simba_lock *lock = NULL;
  CHECK(simba_session_lock_timeout(session, "ledger", 10000, &lock));
  uint64_t token = 0;
  CHECK(simba_lock_check(lock, &token)); /* the token, if still held: before every write */
  uint64_t term_token = 0, valid_ms = 0;
  CHECK(simba_lock_term(lock, &term_token, &valid_ms)); /* the term: token and time left */
  printf("lock ledger: token %llu, valid for %llu ms\n", (unsigned long long)term_token,
         (unsigned long long)valid_ms);
  EXPECT(term_token == token && valid_ms > 0 && valid_ms <= config.lease_ms);
  EXPECT(fenced_write(token, "while holding the lock"));

  /* Cut the session off; the library notices at its next keep-alive. */
  CHECK(simba_session_sever(session));
  simba_event *event = NULL;
  CHECK(simba_lock_next_event(lock, 10000, &event));
  printf("lock event: %s token=%llu reason=%s\n", kind_name(event->kind),
         (unsigned long long)event->token,
         event->reason == SIMBA_LOSS_SESSION_EXPIRED ? "SESSION_EXPIRED" : "other");
  EXPECT(event->kind == SIMBA_EVENT_LOCK_LOST && event->token == token);
  CHECK(simba_event_free(event));

  bool valid = true;
  CHECK(simba_lock_is_valid(lock, &valid));
  EXPECT(!valid);
  uint64_t unused;
  simba_status st = simba_lock_check(lock, &unused);
  printf("check after the loss: %s (%s)\n", simba_status_name((int)st), simba_last_error());
  EXPECT(st == SIMBA_LEASE_LOST);
  EXPECT(simba_lock_term(lock, &term_token, &valid_ms) == SIMBA_LEASE_LOST);
  CHECK(simba_lock_free(lock));

  /* The session reopens on its own (reopen_on_expiry); locks wait for it. */
  CHECK(simba_session_lock_timeout(session, "ledger", 10000, &lock));
  uint64_t token2 = 0;
  CHECK(simba_lock_check(lock, &token2));
  EXPECT(token2 > token);
  EXPECT(fenced_write(token2, "after taking the lock again"));
  EXPECT(!fenced_write(token, "a late write with the lost token"));

  /* The same rule where the data lives: a file fence refuses the lost token's write. */
  char dir[] = "/tmp/simba-lock-c-XXXXXX";
  EXPECT(mkdtemp(dir) != NULL);
  simba_fence *fence = NULL;
  CHECK(simba_fence_file(dir, &fence));
  const char totals[] = "totals of the new holder";
  CHECK(simba_fence_put(fence, "ledger", token2, totals, strlen(totals)));
  const char late[] = "late totals of the old holder";
  st = simba_fence_put(fence, "ledger", token, late, strlen(late));
  printf("file fence, the lost token's write: %s (%s)\n", simba_status_name((int)st),
         simba_last_error());
  EXPECT(st == SIMBA_STALE_TOKEN);
  char value[64];
  size_t value_len = 0;
  uint64_t fenced_token = 0;
  CHECK(simba_fence_get(fence, "ledger", &fenced_token, value, sizeof value, &value_len));
  EXPECT(fenced_token == token2 && value_len == strlen(totals) && strcmp(value, totals) == 0);
  CHECK(simba_fence_free(fence));
  /* The fence keeps one file per key: <dir>/<key>/<token, 20 digits>. */
  char path[128];
  snprintf(path, sizeof path, "%s/ledger/%020llu", dir, (unsigned long long)token2);
  EXPECT(unlink(path) == 0);
  snprintf(path, sizeof path, "%s/ledger", dir);
  EXPECT(rmdir(path) == 0 && rmdir(dir) == 0);

  CHECK(simba_lock_unlock(lock));
  CHECK(simba_lock_free(lock));

  /* A semaphore of 2 permits: each permit is a lease with its own fencing token. */
  simba_semaphore *pool = NULL;
  simba_permit *permit = NULL;
  uint32_t index = 0;
  uint64_t permit_token = 0;
  CHECK(simba_session_semaphore(session, "ledger-writers", 2, &pool));
  CHECK(simba_semaphore_acquire_timeout(pool, 10000, &permit));
  CHECK(simba_permit_index(permit, &index));
  CHECK(simba_permit_check(permit, &permit_token));
  printf("permit %u of ledger-writers, token %llu\n", index, (unsigned long long)permit_token);
  CHECK(simba_permit_release(permit));
  CHECK(simba_permit_free(permit));
  CHECK(simba_semaphore_free(pool));

  /* A read-write lock: readers share it, a writer holds it alone with a higher token. */
  simba_rw_lock *catalog = NULL;
  simba_rw_guard *guard = NULL;
  CHECK(simba_session_rw_lock(session, "catalog", &catalog));
  st = simba_rw_lock_read_timeout(catalog, 10000, &guard);
  if (st == SIMBA_UNSUPPORTED) {
    printf("read-write locks: %s\n", simba_last_error());
  } else {
    CHECK(st);
    uint64_t read_token = 0, write_token = 0;
    simba_rw_mode mode = SIMBA_RW_WRITE;
    CHECK(simba_rw_guard_check(guard, &read_token));
    CHECK(simba_rw_guard_mode(guard, &mode));
    EXPECT(mode == SIMBA_RW_READ);
    printf("read term of catalog, token %llu\n", (unsigned long long)read_token);
    CHECK(simba_rw_guard_unlock(guard));
    CHECK(simba_rw_guard_free(guard));
    CHECK(simba_rw_lock_write_timeout(catalog, 10000, &guard));
    CHECK(simba_rw_guard_check(guard, &write_token));
    printf("write term of catalog, token %llu\n", (unsigned long long)write_token);
    EXPECT(write_token > read_token);
    CHECK(simba_rw_guard_unlock(guard));
    CHECK(simba_rw_guard_free(guard));
  }
  CHECK(simba_rw_lock_free(catalog));

  /* Close waits for the final events: no callback runs after it returns. */
  CHECK(simba_session_close(session));
  CHECK(simba_session_free(session));
  EXPECT(atomic_load(&losses) == 1);

  /* Handles are checked: a second free is an error, not a crash. */
  EXPECT(simba_session_free(session) == SIMBA_INVALID_HANDLE);
  printf("ok: tokens %llu then %llu, loss reported once\n", (unsigned long long)token,
         (unsigned long long)token2);
  return 0;
}
