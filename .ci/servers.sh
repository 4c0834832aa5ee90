# Sourced by .ci/test: makes sure every server the tests need answers on loopback.
# Each ensure_* function starts its server when it is not running (installing it with
# apt-get when missing), waits until it answers, and exports the URL the tests read.
# Runtime files go under $SIMBA_CI_DIR (default: target/ci).

SIMBA_CI_DIR=${SIMBA_CI_DIR:-$PWD/target/ci}
mkdir -p "$SIMBA_CI_DIR"

die() { echo "ci: $*" >&2; exit 1; }
log() { echo "ci: $*" >&2; }

# wait_until <seconds> <description> <command...>: polls the command until it succeeds.
wait_until() {
  local limit=$1 what=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "$what did not answer within ${limit}s"
    sleep 0.1
  done
}

# tcp_open <port>: whether something listens on 127.0.0.1:<port> (bash's /dev/tcp; no nc here).
tcp_open() { (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }

apt_install() {
  log "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$@" >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$@" >/dev/null; } \
    || die "apt-get install $* failed"
}

# The backends' issues add their servers here.
ensure_all() {
  :
}
