# Sourced by .ci/test: makes sure every server the tests need answers on loopback.
# Each ensure_* function starts its server when it is not running (installing it with
# apt-get when missing), waits until it answers, and exports the URL the tests read.
# Runtime files go under $SIMBA_CI_DIR (default: target/ci).

SIMBA_CI_DIR=${SIMBA_CI_DIR:-$PWD/target/ci}
mkdir -p "$SIMBA_CI_DIR"

die() { echo "ci: $*" >&2; exit 1; }
log() { echo "ci: $*" >&2; }

# contains <ERE>: whether stdin has a line matching <ERE>. It reads stdin to the end, so the
# writer never gets SIGPIPE: `cmd | grep -q` fails at random under `set -o pipefail` when grep
# exits at its first match while cmd is still writing.
contains() { local out; out=$(cat); grep -qE -- "$1" <<<"$out"; }

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

# ---- ZooKeeper (issue 5) --------------------------------------------------------------------
# Debian's zookeeper 3.8 package, but each server runs `java QuorumPeerMain` directly with its
# own zoo.cfg and data directory under $SIMBA_CI_DIR (Debian's zkServer.sh hard-codes its log
# and pid locations). slf4j-simple on the classpath gives the servers a log.

ZK_CP=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar

ensure_zookeeper_package() {
  if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null; then
    apt_install zookeeper
  fi
  [ -f /usr/share/java/slf4j-simple.jar ] || apt_install libslf4j-java
  [ -f /usr/share/java/zookeeper.jar ] || die "zookeeper.jar missing after installing zookeeper"
}

# zk4 <port> <word>: a four-letter-word command (whitelisted in our configs).
zk4() {
  exec 3<>/dev/tcp/127.0.0.1/"$1" || return 1
  printf '%s' "$2" >&3
  timeout 2 cat <&3
  exec 3>&-
}
zk_serving() { zk4 "$1" srvr 2>/dev/null | contains '^Mode: (standalone|leader|follower)'; }
pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# free_port <first>: the first port from <first> on that nothing listens on.
free_port() {
  local p=$1
  while tcp_open "$p"; do p=$((p + 1)); done
  echo "$p"
}

# zk_start <dir>: writes <dir>/start.sh (which tests run to restart a server they killed) and
# runs it: the server configured in <dir>/zoo.cfg starts in the background, its pid in <dir>/pid.
zk_start() {
  local d=$1
  cat >"$d/start.sh" <<EOF
#!/usr/bin/env bash
cd "$d"
java -Xmx256m -XX:+UseSerialGC -cp "$ZK_CP" org.apache.zookeeper.server.quorum.QuorumPeerMain \\
  "$d/zoo.cfg" >>"$d/server.log" 2>&1 </dev/null &
echo \$! >"$d/pid"
EOF
  bash "$d/start.sh"
}

# A standalone server with a short tickTime, so TCK sessions of 1 s are allowed.
# Exports SIMBA_ZK_URL (zookeeper://127.0.0.1:PORT) and SIMBA_ZK_PID_FILE.
ensure_zookeeper() {
  local d=$SIMBA_CI_DIR/zk
  if ! { pid_alive "$d/pid" && [ -f "$d/port" ] && zk_serving "$(cat "$d/port")"; }; then
    ensure_zookeeper_package
    if [ -f "$d/pid" ]; then kill "$(cat "$d/pid")" 2>/dev/null || true; fi
    rm -rf "$d"; mkdir -p "$d/data"
    local port; port=$(free_port 2181)
    echo "$port" >"$d/port"
    cat >"$d/zoo.cfg" <<EOF
tickTime=100
minSessionTimeout=200
maxSessionTimeout=120000
dataDir=$d/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
maxClientCnxns=0
4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,conf
EOF
    log "starting ZooKeeper on 127.0.0.1:$port"
    zk_start "$d"
    wait_until 60 "ZooKeeper on port $port" zk_serving "$port"
    pid_alive "$d/pid" || die "ZooKeeper exited (port $port taken?): $(tail -5 "$d/server.log")"
  fi
  export SIMBA_ZK_URL="zookeeper://127.0.0.1:$(cat "$d/port")"
  export SIMBA_ZK_PID_FILE="$d/pid"
}

# A 3-node loopback ensemble for the failover test. Exports SIMBA_ZK_ENSEMBLE
# (zookeeper://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3) and SIMBA_ZK_ENSEMBLE_DIR, under which
# zk1..zk3 each hold zoo.cfg, pid, port and server.log (the test kills and restarts servers).
ensure_zookeeper_ensemble() {
  local base=$SIMBA_CI_DIR/zk-ensemble healthy=1 i
  for i in 1 2 3; do
    { pid_alive "$base/zk$i/pid" && [ -f "$base/zk$i/port" ] && zk_serving "$(cat "$base/zk$i/port")"; } || healthy=0
  done
  if [ $healthy = 0 ]; then
    ensure_zookeeper_package
    for i in 1 2 3; do
      if [ -f "$base/zk$i/pid" ]; then kill "$(cat "$base/zk$i/pid")" 2>/dev/null || true; fi
    done
    rm -rf "$base"
    # Quorum and election ports follow the client port (2281 -> 2887, 3887), so two ensembles
    # on one machine never share them (a follower does not listen on its quorum port).
    local ports=() peers=() p=2281 q1 q2
    for i in 1 2 3; do
      p=$(free_port "$p"); ports+=("$p")
      q1=$((p + 606)); q2=$((p + 1606))
      if tcp_open "$q1" || tcp_open "$q2"; then die "ZooKeeper quorum port $q1 or $q2 is in use"; fi
      peers+=("server.$i=127.0.0.1:$q1:$q2")
      p=$((p + 1))
    done
    for i in 1 2 3; do
      local d=$base/zk$i
      mkdir -p "$d/data"; echo "$i" >"$d/data/myid"; echo "${ports[$((i - 1))]}" >"$d/port"
      {
        cat <<EOF
tickTime=200
initLimit=10
syncLimit=5
minSessionTimeout=400
maxSessionTimeout=120000
dataDir=$d/data
clientPort=${ports[$((i - 1))]}
clientPortAddress=127.0.0.1
admin.enableServer=false
maxClientCnxns=0
4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,conf
EOF
        printf '%s\n' "${peers[@]}"
      } >"$d/zoo.cfg"
    done
    log "starting a 3-node ZooKeeper ensemble on 127.0.0.1 ports ${ports[*]}"
    for i in 1 2 3; do zk_start "$base/zk$i"; done
    for i in 1 2 3; do
      wait_until 90 "ZooKeeper ensemble node $i (port ${ports[$((i - 1))]})" zk_serving "${ports[$((i - 1))]}"
    done
  fi
  local hosts=()
  for i in 1 2 3; do hosts+=("127.0.0.1:$(cat "$base/zk$i/port")"); done
  SIMBA_ZK_ENSEMBLE="zookeeper://$(IFS=,; echo "${hosts[*]}")"
  export SIMBA_ZK_ENSEMBLE SIMBA_ZK_ENSEMBLE_DIR=$base
}

# --- Redis -------------------------------------------------------------------------------
# Ports: standalone 6379 (the machine's own server when present), primary 6380 with its
# replica 6381, and a 3-master cluster on 7000-7002. Override with SIMBA_REDIS_*_PORT(S).
REDIS_PORT=${SIMBA_REDIS_PORT:-6379}
REDIS_PRIMARY_PORT=${SIMBA_REDIS_PRIMARY_PORT:-6380}
REDIS_REPLICA_PORT=${SIMBA_REDIS_REPLICA_PORT:-6381}
REDIS_CLUSTER_PORTS=${SIMBA_REDIS_CLUSTER_PORTS:-"7000 7001 7002"}

redis_ping() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | contains PONG; }

need_redis() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || apt_install redis-server redis-tools
  command -v redis-server >/dev/null || die "redis-server is still missing after apt-get install"
}

# start_redis <port> <extra args...>: a private server with its files under $SIMBA_CI_DIR/redis-<port>.
start_redis() {
  local port=$1; shift
  local dir="$SIMBA_CI_DIR/redis-$port"
  mkdir -p "$dir"
  log "starting redis-server on 127.0.0.1:$port ($dir)"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --repl-diskless-sync-delay 0 --enable-debug-command local \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" "$@" \
    || die "redis-server on port $port did not start (see $dir/redis.log)"
  wait_until 20 "redis on port $port" redis_ping "$port"
}

# ensure_redis: the standalone server (6379), started with the machine's own command if stopped.
ensure_redis() {
  need_redis
  if ! redis_ping "$REDIS_PORT"; then
    if [ "$REDIS_PORT" = 6379 ]; then
      log "starting the machine's redis-server on 6379"
      mkdir -p /var/lib/redis /var/log/redis
      redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log || die "redis-server on 6379 did not start"
      wait_until 20 "redis on port 6379" redis_ping 6379
    else
      start_redis "$REDIS_PORT"
    fi
  fi
  export SIMBA_REDIS_URL=${SIMBA_REDIS_URL:-redis://127.0.0.1:$REDIS_PORT}
}

# ensure_redis_misconfigured: a server with the traps `simba doctor` must flag (an
# `allkeys-lru` eviction policy, no AOF) on 6395. Exports SIMBA_REDIS_MISCONFIGURED_URL.
REDIS_MISCONFIGURED_PORT=${SIMBA_REDIS_MISCONFIGURED_PORT:-6395}
ensure_redis_misconfigured() {
  need_redis
  if redis_ping "$REDIS_MISCONFIGURED_PORT"; then
    redis-cli -p "$REDIS_MISCONFIGURED_PORT" config get maxmemory-policy | contains allkeys-lru ||
      die "port $REDIS_MISCONFIGURED_PORT answers but is not the allkeys-lru test server"
  else
    start_redis "$REDIS_MISCONFIGURED_PORT" --maxmemory 64mb --maxmemory-policy allkeys-lru
  fi
  export SIMBA_REDIS_MISCONFIGURED_URL=${SIMBA_REDIS_MISCONFIGURED_URL:-redis://127.0.0.1:$REDIS_MISCONFIGURED_PORT}
}

replica_linked() {
  redis-cli -p "$REDIS_REPLICA_PORT" info replication | contains master_link_status:up &&
    redis-cli -p "$REDIS_PRIMARY_PORT" info replication | contains connected_slaves:1
}

# ensure_redis_replica: a primary with one replica, for WAIT.
ensure_redis_replica() {
  need_redis
  redis_ping "$REDIS_PRIMARY_PORT" || start_redis "$REDIS_PRIMARY_PORT"
  redis_ping "$REDIS_REPLICA_PORT" || start_redis "$REDIS_REPLICA_PORT" --replicaof 127.0.0.1 "$REDIS_PRIMARY_PORT"
  redis-cli -p "$REDIS_REPLICA_PORT" info replication | contains "master_port:$REDIS_PRIMARY_PORT" ||
    die "port $REDIS_REPLICA_PORT answers but is not a replica of $REDIS_PRIMARY_PORT"
  wait_until 30 "the replica on $REDIS_REPLICA_PORT linked to $REDIS_PRIMARY_PORT" replica_linked
  export SIMBA_REDIS_PRIMARY_URL=${SIMBA_REDIS_PRIMARY_URL:-redis://127.0.0.1:$REDIS_PRIMARY_PORT}
  export SIMBA_REDIS_REPLICA_URL=${SIMBA_REDIS_REPLICA_URL:-redis://127.0.0.1:$REDIS_REPLICA_PORT}
}

cluster_ok() {
  local p n; n=$(echo $REDIS_CLUSTER_PORTS | wc -w)
  for p in $REDIS_CLUSTER_PORTS; do
    redis-cli -p "$p" cluster info 2>/dev/null | contains cluster_state:ok || return 1
    redis-cli -p "$p" cluster info 2>/dev/null | contains "cluster_known_nodes:$n" || return 1
  done
}

# ensure_redis_cluster: 3 masters, created with `redis-cli --cluster create`.
ensure_redis_cluster() {
  need_redis
  local p addrs=() hosts=()
  for p in $REDIS_CLUSTER_PORTS; do
    addrs+=("127.0.0.1:$p"); hosts+=("127.0.0.1:$p")
  done
  if ! cluster_ok; then
    for p in $REDIS_CLUSTER_PORTS; do
      redis_ping "$p" || start_redis "$p" --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout 2000
      redis-cli -p "$p" info cluster | contains cluster_enabled:1 ||
        die "port $p answers but is not a cluster node"
    done
    local slots; slots=$(redis-cli -p "${REDIS_CLUSTER_PORTS%% *}" cluster info | sed -n 's/^cluster_slots_assigned:\([0-9]*\).*/\1/p')
    if [ "${slots:-0}" = 0 ]; then
      log "creating the cluster ${addrs[*]}"
      redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$SIMBA_CI_DIR/redis-cluster-create.log" 2>&1 ||
        die "redis-cli --cluster create failed (see $SIMBA_CI_DIR/redis-cluster-create.log)"
    fi
    wait_until 60 "cluster_state:ok on ${addrs[*]} (a stale cluster? stop the nodes and delete $SIMBA_CI_DIR/redis-<port>)" cluster_ok
  fi
  export SIMBA_REDIS_CLUSTER_URL=${SIMBA_REDIS_CLUSTER_URL:-redis+cluster://$(IFS=,; echo "${hosts[*]}")}
}

# PostgreSQL: the Debian cluster on 127.0.0.1:5432; database `test`, trust auth for
# postgres on loopback (the machine's default). Exports SIMBA_POSTGRES_URL.
ensure_postgres() {
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    apt_install postgresql
  fi
  if ! pg_isready -q -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
    local version
    version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
    [ -n "$version" ] || die "no PostgreSQL cluster under /etc/postgresql"
    log "starting PostgreSQL $version"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start \
      || die "pg_ctlcluster $version main start failed"
  fi
  wait_until 60 "PostgreSQL on 127.0.0.1:5432" pg_isready -h 127.0.0.1 -p 5432
  if ! su postgres -c "psql -Atqc \"select 1 from pg_database where datname = 'test'\"" | contains 1; then
    su postgres -c "createdb test" || die "createdb test failed"
  fi
  psql -h 127.0.0.1 -U postgres -d test -Atqc "select 1" >/dev/null \
    || die "PostgreSQL does not let postgres@127.0.0.1 into database test (trust auth expected)"
  export SIMBA_POSTGRES_URL=${SIMBA_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
}

# PgBouncer 1.18 in transaction mode on 127.0.0.1:$PGBOUNCER_PORT in front of the PostgreSQL of
# ensure_postgres (database `test`, trust auth), for `simba doctor` to flag: each transaction
# may run on another server connection. `options` is in ignore_startup_parameters, as
# deployments set it for clients that send one, so the backend's `-c statement_timeout` is
# dropped. Runs as the postgres user (PgBouncer refuses root). Exports SIMBA_PGBOUNCER_URL.
# Not 6432: the Debian package's own pgbouncer service listens there where systemd runs it.
PGBOUNCER_PORT=${SIMBA_PGBOUNCER_PORT:-6436}

pgbouncer_up() {
  psql -h 127.0.0.1 -p "$PGBOUNCER_PORT" -U postgres -d test -Atqc "select 1" 2>/dev/null | contains '^1$'
}

ensure_pgbouncer() {
  local d=$SIMBA_CI_DIR/pgbouncer
  [ -x /usr/sbin/pgbouncer ] || apt_install pgbouncer
  if ! { pid_alive "$d/pgbouncer.pid" && pgbouncer_up; }; then
    tcp_open "$PGBOUNCER_PORT" && die "port $PGBOUNCER_PORT is taken by something that is not our PgBouncer"
    mkdir -p "$d"; make_traversable "$d"
    printf '"postgres" ""\n' >"$d/userlist.txt"
    cat >"$d/pgbouncer.ini" <<EOF
[databases]
test = host=127.0.0.1 port=5432 dbname=test

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGBOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $d/userlist.txt
pool_mode = transaction
ignore_startup_parameters = options,extra_float_digits
default_pool_size = 10
max_client_conn = 200
logfile = $d/pgbouncer.log
pidfile = $d/pgbouncer.pid
EOF
    chown -R postgres: "$d"
    log "starting PgBouncer (transaction mode) on 127.0.0.1:$PGBOUNCER_PORT"
    su postgres -s /bin/sh -c "/usr/sbin/pgbouncer -d -q '$d/pgbouncer.ini'" \
      || die "PgBouncer did not start (see $d/pgbouncer.log)"
    wait_until 30 "PgBouncer on 127.0.0.1:$PGBOUNCER_PORT" pgbouncer_up
  fi
  export SIMBA_PGBOUNCER_URL=${SIMBA_PGBOUNCER_URL:-postgres://postgres@127.0.0.1:$PGBOUNCER_PORT/test}
}

# MariaDB (or MySQL) on 127.0.0.1:3306; database `test` and user simba/simba created through
# the root unix socket (a stock Debian MariaDB lets root in only that way). Exports
# SIMBA_MYSQL_URL.
ensure_mysql() {
  if ! command -v mariadbd >/dev/null 2>&1 && ! command -v mysqld >/dev/null 2>&1; then
    apt_install mariadb-server
  fi
  local admin=(mysql --protocol=socket -uroot)
  if ! "${admin[@]}" -e "select 1" >/dev/null 2>&1; then
    log "starting MariaDB"
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd \
      || die "starting mariadbd failed"
  fi
  wait_until 60 "MariaDB on its unix socket" "${admin[@]}" -e "select 1"
  wait_until 30 "MariaDB on 127.0.0.1:3306" tcp_open 3306
  "${admin[@]}" -e "CREATE DATABASE IF NOT EXISTS test;
    CREATE USER IF NOT EXISTS 'simba'@'127.0.0.1' IDENTIFIED BY 'simba';
    CREATE USER IF NOT EXISTS 'simba'@'localhost' IDENTIFIED BY 'simba';
    GRANT ALL ON test.* TO 'simba'@'127.0.0.1';
    GRANT ALL ON test.* TO 'simba'@'localhost';" \
    || die "creating the MariaDB test database and user failed"
  mysql --protocol=tcp -h127.0.0.1 -P3306 -usimba -psimba test -e "select 1" >/dev/null \
    || die "user simba cannot reach database test on 127.0.0.1:3306"
  export SIMBA_MYSQL_URL=${SIMBA_MYSQL_URL:-mysql://simba:simba@127.0.0.1:3306/test}
}
# ---- Redis over TLS (issue 12) --------------------------------------------------------------
# A throwaway CA under $SIMBA_CI_DIR/redis-tls signs: a server certificate for 127.0.0.1 and
# localhost, a client certificate, an expired server certificate and one for another host name.
# Four servers listen on TLS only (no plaintext port): the good certificate (with an ACL user
# `simba` whose password is `simba-secret`), the expired one, the wrong-host one, and the good
# one requiring a client certificate. Exports SIMBA_REDIS_TLS_URL, SIMBA_REDIS_TLS_EXPIRED_URL,
# SIMBA_REDIS_TLS_WRONG_HOST_URL, SIMBA_REDIS_TLS_CLIENT_AUTH_URL (all
# rediss://127.0.0.1:PORT) and SIMBA_REDIS_TLS_DIR (ca.pem, client.pem, client.key, other-ca.pem).
REDIS_TLS_PORT=${REDIS_TLS_PORT:-6390}
REDIS_TLS_EXPIRED_PORT=${REDIS_TLS_EXPIRED_PORT:-6391}
REDIS_TLS_WRONG_HOST_PORT=${REDIS_TLS_WRONG_HOST_PORT:-6392}
REDIS_TLS_CLIENT_AUTH_PORT=${REDIS_TLS_CLIENT_AUTH_PORT:-6393}

redis_tls_ping() {
  local d=$SIMBA_CI_DIR/redis-tls
  redis-cli --tls --cacert "$d/ca.pem" --cert "$d/client.pem" --key "$d/client.key" \
    -h 127.0.0.1 -p "$1" ping 2>/dev/null | contains PONG
}

# redis_tls_listening <port>: answers a TLS handshake whatever its certificate (expired ones).
redis_tls_listening() {
  local d=$SIMBA_CI_DIR/redis-tls
  redis-cli --tls --insecure --cert "$d/client.pem" --key "$d/client.key" \
    -h 127.0.0.1 -p "$1" ping 2>/dev/null | contains PONG
}

# tls_cert <name> <days> <subjectAltName>: <name>.pem/<name>.key signed by the CA.
tls_cert() {
  local d=$SIMBA_CI_DIR/redis-tls name=$1 days=$2 san=$3
  openssl req -newkey rsa:2048 -nodes -keyout "$d/$name.key" -out "$d/$name.csr" \
    -subj "/CN=simba-ci-$name" >/dev/null 2>&1 || die "openssl req for $name failed"
  printf 'subjectAltName=%s\n' "$san" >"$d/$name.ext"
  openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
    -days "$days" -extfile "$d/$name.ext" -out "$d/$name.pem" >/dev/null 2>&1 \
    || die "openssl x509 for $name failed"
}

ensure_redis_tls_certs() {
  local d=$SIMBA_CI_DIR/redis-tls
  [ -f "$d/done" ] && return 0
  command -v openssl >/dev/null || apt_install openssl
  rm -rf "$d"; mkdir -p "$d"
  log "making a throwaway CA and certificates in $d"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.pem" -days 3650 \
    -subj /CN=simba-ci-ca >/dev/null 2>&1 || die "openssl: the CA failed"
  # Another CA, which signed none of the servers' certificates.
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/other-ca.key" -out "$d/other-ca.pem" \
    -days 3650 -subj /CN=simba-ci-other-ca >/dev/null 2>&1 || die "openssl: the other CA failed"
  tls_cert server 3650 "IP:127.0.0.1,DNS:localhost"
  tls_cert client 3650 "DNS:simba-client"
  # notAfter one day before notBefore: expired from the start.
  tls_cert expired -1 "IP:127.0.0.1,DNS:localhost"
  tls_cert wrong-host 3650 "DNS:wrong-host.invalid"
  touch "$d/done"
}

# start_redis_tls <port> <cert name> <extra args...>: a TLS-only server (no plaintext port).
start_redis_tls() {
  local port=$1 name=$2; shift 2
  local d=$SIMBA_CI_DIR/redis-tls dir="$SIMBA_CI_DIR/redis-tls-$port"
  mkdir -p "$dir"
  tcp_open "$port" && die "port $port is taken by something that is not our TLS Redis"
  log "starting redis-server with TLS on 127.0.0.1:$port ($name certificate)"
  redis-server --port 0 --tls-port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --tls-cert-file "$d/$name.pem" --tls-key-file "$d/$name.key" --tls-ca-cert-file "$d/ca.pem" \
    --tls-auth-clients optional \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" "$@" \
    || die "redis-server with TLS on port $port did not start (see $dir/redis.log)"
  wait_until 20 "redis with TLS on port $port" redis_tls_listening "$port"
}

ensure_redis_tls() {
  need_redis
  command -v redis-cli >/dev/null && redis-cli --help 2>&1 | contains --tls \
    || die "redis-cli has no TLS support"
  ensure_redis_tls_certs
  redis_tls_ping "$REDIS_TLS_PORT" || start_redis_tls "$REDIS_TLS_PORT" server \
    --user default on nopass '~*' '&*' '+@all' \
    --user simba on '>simba-secret' '~*' '&*' '+@all'
  redis_tls_ping "$REDIS_TLS_PORT" || die "redis with TLS on port $REDIS_TLS_PORT does not answer"
  redis_tls_listening "$REDIS_TLS_EXPIRED_PORT" || start_redis_tls "$REDIS_TLS_EXPIRED_PORT" expired
  redis_tls_listening "$REDIS_TLS_WRONG_HOST_PORT" || start_redis_tls "$REDIS_TLS_WRONG_HOST_PORT" wrong-host
  # Later arguments win: this one requires a client certificate signed by the CA.
  redis_tls_ping "$REDIS_TLS_CLIENT_AUTH_PORT" ||
    start_redis_tls "$REDIS_TLS_CLIENT_AUTH_PORT" server --tls-auth-clients yes
  export SIMBA_REDIS_TLS_DIR=$SIMBA_CI_DIR/redis-tls
  export SIMBA_REDIS_TLS_URL=rediss://127.0.0.1:$REDIS_TLS_PORT
  export SIMBA_REDIS_TLS_EXPIRED_URL=rediss://127.0.0.1:$REDIS_TLS_EXPIRED_PORT
  export SIMBA_REDIS_TLS_WRONG_HOST_URL=rediss://127.0.0.1:$REDIS_TLS_WRONG_HOST_PORT
  export SIMBA_REDIS_TLS_CLIENT_AUTH_URL=rediss://127.0.0.1:$REDIS_TLS_CLIENT_AUTH_PORT
}

# A 3-master Redis Cluster over TLS only (client and bus), with the good certificate. Exports
# SIMBA_REDIS_TLS_CLUSTER_URL (rediss+cluster://127.0.0.1:7100,...).
REDIS_TLS_CLUSTER_PORTS=${SIMBA_REDIS_TLS_CLUSTER_PORTS:-"7100 7101 7102"}

redis_tls_cli() {
  local d=$SIMBA_CI_DIR/redis-tls
  redis-cli --tls --cacert "$d/ca.pem" --cert "$d/client.pem" --key "$d/client.key" "$@"
}

tls_cluster_ok() {
  local p n; n=$(echo $REDIS_TLS_CLUSTER_PORTS | wc -w)
  for p in $REDIS_TLS_CLUSTER_PORTS; do
    redis_tls_cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | contains cluster_state:ok || return 1
    redis_tls_cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | contains "cluster_known_nodes:$n" || return 1
  done
}

ensure_redis_tls_cluster() {
  ensure_redis_tls_certs
  local p addrs=()
  for p in $REDIS_TLS_CLUSTER_PORTS; do addrs+=("127.0.0.1:$p"); done
  if ! tls_cluster_ok; then
    for p in $REDIS_TLS_CLUSTER_PORTS; do
      redis_tls_ping "$p" || start_redis_tls "$p" server --tls-cluster yes --cluster-enabled yes \
        --cluster-config-file nodes.conf --cluster-node-timeout 2000
      redis_tls_cli -h 127.0.0.1 -p "$p" info cluster | contains cluster_enabled:1 ||
        die "port $p answers but is not a cluster node"
    done
    local slots; slots=$(redis_tls_cli -h 127.0.0.1 -p "${REDIS_TLS_CLUSTER_PORTS%% *}" cluster info | sed -n 's/^cluster_slots_assigned:\([0-9]*\).*/\1/p')
    if [ "${slots:-0}" = 0 ]; then
      log "creating the TLS cluster ${addrs[*]}"
      redis_tls_cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$SIMBA_CI_DIR/redis-tls-cluster-create.log" 2>&1 ||
        die "redis-cli --cluster create failed (see $SIMBA_CI_DIR/redis-tls-cluster-create.log)"
    fi
    wait_until 60 "cluster_state:ok on ${addrs[*]} (a stale cluster? stop the nodes and delete $SIMBA_CI_DIR/redis-tls-<port>)" tls_cluster_ok
  fi
  export SIMBA_REDIS_TLS_CLUSTER_URL=rediss+cluster://$(IFS=,; echo "${addrs[*]}")
}


# ---- PostgreSQL and MariaDB over TLS (issue 12) ----------------------------------------------
# Private servers with the certificates of the Redis TLS CA ($SIMBA_CI_DIR/redis-tls: server,
# expired, wrong-host; client certificates signed by ca.pem). Each takes TLS only on TCP.
#
# PostgreSQL (the machine's binaries, run as the `postgres` user): 5442 with the good
# certificate, 5443 with the expired one, 5444 with the wrong-host one. pg_hba: `hostssl` with
# scram-sha-256 for user simba (password simba-secret, owner of database `test`), `hostssl`
# with scram-sha-256 plus `clientcert=verify-ca` for user simba_cert (same password, member of
# simba), `hostnossl … reject` for everything else.
# MariaDB (mariadbd as root, its own datadir and socket): 3316 good, 3317 expired, 3318
# wrong-host, all with require_secure_transport=ON; user simba/simba-secret REQUIRE SSL and
# simba_cert/simba-secret REQUIRE X509, both with every right on database `test`.
# Exports SIMBA_PG_TLS_URL, SIMBA_PG_TLS_EXPIRED_URL, SIMBA_PG_TLS_WRONG_HOST_URL (postgres://
# simba:simba-secret@127.0.0.1:PORT/test), SIMBA_MYSQL_TLS_URL, SIMBA_MYSQL_TLS_EXPIRED_URL,
# SIMBA_MYSQL_TLS_WRONG_HOST_URL (mysql://simba:simba-secret@127.0.0.1:PORT/test) and
# SIMBA_SQL_TLS_DIR (the CA directory: ca.pem, other-ca.pem, client.pem, client.key).
PG_TLS_PORT=${SIMBA_PG_TLS_PORT:-5442}
PG_TLS_EXPIRED_PORT=${SIMBA_PG_TLS_EXPIRED_PORT:-5443}
PG_TLS_WRONG_HOST_PORT=${SIMBA_PG_TLS_WRONG_HOST_PORT:-5444}
MYSQL_TLS_PORT=${SIMBA_MYSQL_TLS_PORT:-3316}
MYSQL_TLS_EXPIRED_PORT=${SIMBA_MYSQL_TLS_EXPIRED_PORT:-3317}
MYSQL_TLS_WRONG_HOST_PORT=${SIMBA_MYSQL_TLS_WRONG_HOST_PORT:-3318}

# make_traversable <dir>: lets the postgres user pass through <dir> and every parent of it.
make_traversable() {
  local p=$1
  while [ "$p" != / ] && [ -n "$p" ]; do
    if ! su postgres -s /bin/sh -c "test -x '$p'" 2>/dev/null; then
      log "chmod o+x $p (the postgres user must reach its data directory)"
      chmod o+x "$p" || die "chmod o+x $p failed"
    fi
    p=$(dirname "$p")
  done
}

pg_tls_bin() {
  local b
  b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -z "$b" ] || [ ! -x "$b/initdb" ]; then apt_install postgresql; fi
  b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$b" ] && [ -x "$b/initdb" ] || die "no initdb under /usr/lib/postgresql/*/bin"
  echo "$b"
}

# pg_tls_up <port>: our server answers on its unix socket (TCP takes TLS only).
pg_tls_up() {
  local d=$SIMBA_CI_DIR/pg-tls-$1
  [ -S "$d/.s.PGSQL.$1" ] &&
    psql -h "$d" -p "$1" -U postgres -d postgres -Atqc "select 1" 2>/dev/null | contains 1
}

# start_pg_tls <port> <cert name>: a TLS-only PostgreSQL with its files under pg-tls-<port>.
start_pg_tls() {
  local port=$1 name=$2 bin d c=$SIMBA_CI_DIR/redis-tls
  d=$SIMBA_CI_DIR/pg-tls-$port
  pg_tls_up "$port" && return 0
  tcp_open "$port" && die "port $port is taken by something that is not our TLS PostgreSQL"
  bin=$(pg_tls_bin) || exit 1
  if [ ! -f "$d/data/PG_VERSION" ]; then
    rm -rf "$d"; mkdir -p "$d"; chown postgres: "$d"; make_traversable "$d"
    log "initdb for the TLS PostgreSQL on 127.0.0.1:$port ($name certificate)"
    su postgres -s /bin/sh -c "'$bin/initdb' -D '$d/data' -U postgres -A trust -E UTF8 --no-sync" \
      >"$d/initdb.log" 2>&1 || die "initdb failed (see $d/initdb.log)"
    cat >>"$d/data/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$d'
ssl = on
ssl_cert_file = '$d/server.pem'
ssl_key_file = '$d/server.key'
ssl_ca_file = '$d/ca.pem'
password_encryption = scram-sha-256
shared_buffers = 16MB
max_connections = 60
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
    cat >"$d/data/pg_hba.conf" <<CONF
local     all  postgres                  trust
hostssl   all  simba_cert  127.0.0.1/32  scram-sha-256 clientcert=verify-ca
hostssl   all  simba       127.0.0.1/32  scram-sha-256
hostnossl all  all         0.0.0.0/0     reject
hostnossl all  all         ::/0          reject
CONF
    chown postgres: "$d/data/postgresql.conf" "$d/data/pg_hba.conf"
  fi
  # The certificates as they are now (the CA directory may have been made anew).
  cp "$c/$name.pem" "$d/server.pem"; cp "$c/$name.key" "$d/server.key"; cp "$c/ca.pem" "$d/ca.pem"
  chown postgres: "$d/server.pem" "$d/server.key" "$d/ca.pem"; chmod 600 "$d/server.key"
  log "starting the TLS PostgreSQL on 127.0.0.1:$port ($name certificate)"
  su postgres -s /bin/sh -c "'$bin/pg_ctl' -D '$d/data' -l '$d/server.log' -w -t 60 start" >/dev/null 2>&1 \
    || die "the TLS PostgreSQL on port $port did not start (see $d/server.log)"
  wait_until 60 "the TLS PostgreSQL on port $port" pg_tls_up "$port"
  psql -h "$d" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -q >/dev/null <<'SQL' \
    || die "creating the users of the TLS PostgreSQL on port $port failed"
SET client_min_messages = warning;
SELECT 'CREATE ROLE simba LOGIN' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'simba') \gexec
SELECT 'CREATE ROLE simba_cert LOGIN' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'simba_cert') \gexec
ALTER ROLE simba PASSWORD 'simba-secret';
ALTER ROLE simba_cert PASSWORD 'simba-secret';
GRANT simba TO simba_cert;
SELECT 'CREATE DATABASE test OWNER simba' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'test') \gexec
SQL
}

ensure_postgres_tls() {
  ensure_redis_tls_certs
  start_pg_tls "$PG_TLS_PORT" server
  start_pg_tls "$PG_TLS_EXPIRED_PORT" expired
  start_pg_tls "$PG_TLS_WRONG_HOST_PORT" wrong-host
  export SIMBA_SQL_TLS_DIR=$SIMBA_CI_DIR/redis-tls
  export SIMBA_PG_TLS_URL=postgres://simba:simba-secret@127.0.0.1:$PG_TLS_PORT/test
  export SIMBA_PG_TLS_EXPIRED_URL=postgres://simba:simba-secret@127.0.0.1:$PG_TLS_EXPIRED_PORT/test
  export SIMBA_PG_TLS_WRONG_HOST_URL=postgres://simba:simba-secret@127.0.0.1:$PG_TLS_WRONG_HOST_PORT/test
}

# mariadb_tls_up <port>: our server answers on its own unix socket.
mariadb_tls_up() {
  mariadb --no-defaults --protocol=socket -S "$SIMBA_CI_DIR/mariadb-tls-$1/sock" -uroot \
    -e "select 1" >/dev/null 2>&1
}

# start_mariadb_tls <port> <cert name>: a TLS-only MariaDB with its files under mariadb-tls-<port>.
start_mariadb_tls() {
  local port=$1 name=$2 d c=$SIMBA_CI_DIR/redis-tls
  d=$SIMBA_CI_DIR/mariadb-tls-$port
  mariadb_tls_up "$port" && return 0
  tcp_open "$port" && die "port $port is taken by something that is not our TLS MariaDB"
  command -v mariadb-install-db >/dev/null || apt_install mariadb-server
  if [ ! -d "$d/data/mysql" ]; then
    rm -rf "$d"; mkdir -p "$d"
    log "mariadb-install-db for the TLS MariaDB on 127.0.0.1:$port ($name certificate)"
    mariadb-install-db --no-defaults --datadir="$d/data" --user=root --skip-test-db \
      >"$d/install.log" 2>&1 || die "mariadb-install-db failed (see $d/install.log)"
  fi
  cp "$c/$name.pem" "$d/server.pem"; cp "$c/$name.key" "$d/server.key"; cp "$c/ca.pem" "$d/ca.pem"
  log "starting the TLS MariaDB on 127.0.0.1:$port ($name certificate)"
  setsid mariadbd --no-defaults --user=root --datadir="$d/data" --port="$port" \
    --bind-address=127.0.0.1 --socket="$d/sock" --pid-file="$d/pid" --log-error="$d/error.log" \
    --ssl-ca="$d/ca.pem" --ssl-cert="$d/server.pem" --ssl-key="$d/server.key" \
    --require-secure-transport=ON --skip-name-resolve --performance-schema=OFF \
    --innodb-buffer-pool-size=16M --innodb-flush-log-at-trx-commit=0 \
    --max-connections=100 </dev/null >>"$d/stdout.log" 2>&1 &
  wait_until 60 "the TLS MariaDB on port $port (see $d/error.log)" mariadb_tls_up "$port"
  wait_until 30 "the TLS MariaDB on 127.0.0.1:$port" tcp_open "$port"
  mariadb --no-defaults --protocol=socket -S "$d/sock" -uroot -e "CREATE DATABASE IF NOT EXISTS test;
    CREATE USER IF NOT EXISTS 'simba'@'127.0.0.1' IDENTIFIED BY 'simba-secret' REQUIRE SSL;
    CREATE USER IF NOT EXISTS 'simba_cert'@'127.0.0.1' IDENTIFIED BY 'simba-secret' REQUIRE X509;
    GRANT ALL ON test.* TO 'simba'@'127.0.0.1';
    GRANT ALL ON test.* TO 'simba_cert'@'127.0.0.1';" \
    || die "creating the users of the TLS MariaDB on port $port failed"
}

ensure_mysql_tls() {
  ensure_redis_tls_certs
  start_mariadb_tls "$MYSQL_TLS_PORT" server
  start_mariadb_tls "$MYSQL_TLS_EXPIRED_PORT" expired
  start_mariadb_tls "$MYSQL_TLS_WRONG_HOST_PORT" wrong-host
  export SIMBA_SQL_TLS_DIR=$SIMBA_CI_DIR/redis-tls
  export SIMBA_MYSQL_TLS_URL=mysql://simba:simba-secret@127.0.0.1:$MYSQL_TLS_PORT/test
  export SIMBA_MYSQL_TLS_EXPIRED_URL=mysql://simba:simba-secret@127.0.0.1:$MYSQL_TLS_EXPIRED_PORT/test
  export SIMBA_MYSQL_TLS_WRONG_HOST_URL=mysql://simba:simba-secret@127.0.0.1:$MYSQL_TLS_WRONG_HOST_PORT/test
}

# ---- ZooKeeper over TLS (issue 12) ----------------------------------------------------------
# TLS-only standalone servers (a `secureClientPort` on Netty, no plaintext `clientPort`) with
# the certificates of the Redis TLS CA ($SIMBA_CI_DIR/redis-tls) as PEM key and trust stores:
# 2291 with the good certificate (client certificates optional: `ssl.clientAuth=want`), 2292
# with the expired one, 2293 with the wrong-host one, 2294 with the good one requiring a client
# certificate signed by the CA (`ssl.clientAuth=need`). The servers do not check host names in
# client certificates. Each has its files (zoo.cfg, pid, port, server.log, start.sh) under
# zk-tls-<port>. Exports SIMBA_ZK_TLS_URL, SIMBA_ZK_TLS_EXPIRED_URL,
# SIMBA_ZK_TLS_WRONG_HOST_URL, SIMBA_ZK_TLS_CLIENT_AUTH_URL (zookeeper+tls://127.0.0.1:PORT)
# and SIMBA_ZK_TLS_DIR (the CA directory: ca.pem, other-ca.pem, client.pem, client.key).
ZK_TLS_PORT=${SIMBA_ZK_TLS_PORT:-2291}
ZK_TLS_EXPIRED_PORT=${SIMBA_ZK_TLS_EXPIRED_PORT:-2292}
ZK_TLS_WRONG_HOST_PORT=${SIMBA_ZK_TLS_WRONG_HOST_PORT:-2293}
ZK_TLS_CLIENT_AUTH_PORT=${SIMBA_ZK_TLS_CLIENT_AUTH_PORT:-2294}
# Netty (Debian's libnetty-java) serves the secure client port.
ZK_TLS_CP=$ZK_CP:/usr/share/java/netty-buffer.jar:/usr/share/java/netty-codec.jar:/usr/share/java/netty-common.jar:/usr/share/java/netty-handler.jar:/usr/share/java/netty-resolver.jar:/usr/share/java/netty-transport.jar:/usr/share/java/netty-transport-native-unix-common.jar:/usr/share/java/netty-transport-native-epoll.jar

# zk_tls_serving <port>: a ZooKeeper answers `srvr` over TLS there (whatever its certificate;
# with the client certificate, for the server that requires one).
zk_tls_serving() {
  local c=$SIMBA_CI_DIR/redis-tls
  printf srvr | timeout 5 openssl s_client -connect 127.0.0.1:"$1" -quiet \
    -cert "$c/client.pem" -key "$c/client.key" 2>/dev/null | contains '^Mode: standalone'
}

# start_zk_tls <port> <cert name> <clientAuth>: a TLS-only ZooKeeper under zk-tls-<port>,
# unless ours answers there already.
start_zk_tls() {
  local port=$1 name=$2 auth=$3 c=$SIMBA_CI_DIR/redis-tls d=$SIMBA_CI_DIR/zk-tls-$1
  pid_alive "$d/pid" && zk_tls_serving "$port" && return 0
  if [ -f "$d/pid" ]; then kill "$(cat "$d/pid")" 2>/dev/null || true; fi
  tcp_open "$port" && die "port $port is taken by something that is not our TLS ZooKeeper"
  rm -rf "$d"; mkdir -p "$d/data"; echo "$port" >"$d/port"
  # ZooKeeper's PEM key store: the private key (PKCS#8) and the certificate in one file.
  cat "$c/$name.key" "$c/$name.pem" >"$d/keystore.pem"; cp "$c/ca.pem" "$d/ca.pem"
  cat >"$d/zoo.cfg" <<EOF
tickTime=100
minSessionTimeout=200
maxSessionTimeout=120000
dataDir=$d/data
secureClientPort=$port
secureClientPortAddress=127.0.0.1
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=$d/keystore.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=$d/ca.pem
ssl.trustStore.type=PEM
ssl.clientAuth=$auth
ssl.hostnameVerification=false
admin.enableServer=false
maxClientCnxns=0
4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,conf
EOF
  cat >"$d/start.sh" <<EOF
#!/usr/bin/env bash
cd "$d"
java -Xmx128m -XX:+UseSerialGC -cp "$ZK_TLS_CP" org.apache.zookeeper.server.quorum.QuorumPeerMain \\
  "$d/zoo.cfg" >>"$d/server.log" 2>&1 </dev/null &
echo \$! >"$d/pid"
EOF
  log "starting a TLS-only ZooKeeper on 127.0.0.1:$port ($name certificate, clientAuth=$auth)"
  bash "$d/start.sh"
}

ensure_zookeeper_tls() {
  local p
  ensure_zookeeper_package
  [ -f /usr/share/java/netty-handler.jar ] || apt_install libnetty-java
  ensure_redis_tls_certs
  start_zk_tls "$ZK_TLS_PORT" server want
  start_zk_tls "$ZK_TLS_EXPIRED_PORT" expired want
  start_zk_tls "$ZK_TLS_WRONG_HOST_PORT" wrong-host want
  start_zk_tls "$ZK_TLS_CLIENT_AUTH_PORT" server need
  for p in "$ZK_TLS_PORT" "$ZK_TLS_EXPIRED_PORT" "$ZK_TLS_WRONG_HOST_PORT" "$ZK_TLS_CLIENT_AUTH_PORT"; do
    wait_until 60 "the TLS ZooKeeper on port $p (see $SIMBA_CI_DIR/zk-tls-$p/server.log)" zk_tls_serving "$p"
    pid_alive "$SIMBA_CI_DIR/zk-tls-$p/pid" ||
      die "the TLS ZooKeeper on port $p exited: $(tail -5 "$SIMBA_CI_DIR/zk-tls-$p/server.log")"
  done
  export SIMBA_ZK_TLS_DIR=$SIMBA_CI_DIR/redis-tls
  export SIMBA_ZK_TLS_URL=zookeeper+tls://127.0.0.1:$ZK_TLS_PORT
  export SIMBA_ZK_TLS_EXPIRED_URL=zookeeper+tls://127.0.0.1:$ZK_TLS_EXPIRED_PORT
  export SIMBA_ZK_TLS_WRONG_HOST_URL=zookeeper+tls://127.0.0.1:$ZK_TLS_WRONG_HOST_PORT
  export SIMBA_ZK_TLS_CLIENT_AUTH_URL=zookeeper+tls://127.0.0.1:$ZK_TLS_CLIENT_AUTH_PORT
}

# The backends' issues add their servers here.
ensure_all() {
  ensure_zookeeper
  ensure_zookeeper_ensemble
  ensure_redis
  ensure_redis_replica
  ensure_redis_misconfigured
  ensure_redis_cluster
  ensure_redis_tls
  ensure_redis_tls_cluster
  ensure_postgres
  ensure_pgbouncer
  ensure_mysql
  ensure_postgres_tls
  ensure_mysql_tls
  ensure_zookeeper_tls
}
