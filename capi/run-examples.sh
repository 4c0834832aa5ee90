#!/usr/bin/env bash
# Builds the C ABI (feature `redis`), compiles capi/examples/lock.c against the cdylib and
# the staticlib, and runs it and capi/examples/lock.py on `memory://` and on the Redis of
# .ci/servers.sh (a random key prefix, deleted afterwards); the statically linked program
# runs on `memory://`. Fails on the first error.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/servers.sh
ensure_redis

cargo build -p simba-lease-capi --features redis
target=$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
lib_dir=$target/debug
[ -f "$lib_dir/libsimba_lease_c.so" ] || die "no $lib_dir/libsimba_lease_c.so after the build"
out=$target/capi-examples
mkdir -p "$out"
gcc -std=c11 -Wall -Wextra -Werror -I capi/include capi/examples/lock.c \
  -L "$lib_dir" -lsimba_lease_c -Wl,-rpath,"$lib_dir" -o "$out/lock" \
  || die "compiling capi/examples/lock.c failed"
# The same program linked with the static library.
gcc -std=c11 -Wall -Wextra -Werror -I capi/include capi/examples/lock.c \
  "$lib_dir/libsimba_lease_c.a" -lpthread -ldl -lm -o "$out/lock-static" \
  || die "linking capi/examples/lock.c with libsimba_lease_c.a failed"
log "capi example lock.c, statically linked, on memory://"
"$out/lock-static" memory:// || die "the statically linked capi/examples/lock.c failed"

prefix=simba-capi-example-$$-$RANDOM
cleanup() { redis-cli -p "$REDIS_PORT" --scan --pattern "$prefix*" | xargs -r redis-cli -p "$REDIS_PORT" del >/dev/null; }
trap cleanup EXIT
redis_url="$SIMBA_REDIS_URL"
case "$redis_url" in *\?*) redis_url="$redis_url&prefix=$prefix" ;; *) redis_url="$redis_url?prefix=$prefix" ;; esac

for url in memory:// "$redis_url"; do
  log "capi example lock.c on $url"
  "$out/lock" "$url" || die "capi/examples/lock.c failed on $url"
  log "capi example lock.py on $url"
  # -O strips `assert`: the example's checks are explicit, so they still run.
  python3 -O capi/examples/lock.py "$lib_dir/libsimba_lease_c.so" "$url" \
    || die "capi/examples/lock.py failed on $url"
done
log "capi examples passed"
