#!/usr/bin/env bash
# A three-node NATS JetStream cluster on one machine, on loopback ports, for dlq.
#
#   cluster.sh start            start n1, n2, n3 (those not running) and wait until every node
#                               answers /healthz and the cluster has a JetStream meta leader
#   cluster.sh stop             stop every node (SIGTERM, then SIGKILL after 10 s)
#   cluster.sh status           one line per node; exit 0 only if all three are healthy
#   cluster.sh kill NODE        SIGKILL one node (a crash drill); NODE is n1, n2 or n3
#   cluster.sh restart NODE     stop the node if it runs, start it, wait until it is healthy
#   cluster.sh render           only write the configs into the base dir (prints their paths)
#   cluster.sh run NODE         render, then run the node in the foreground (exec: for a
#                               supervisor such as systemd, or a test that owns the process)
#   cluster.sh urls             the client URLs, one per line
#   cluster.sh credentials      where the CA certificate and each user's password file are
#                               (paths only: it never prints a password)
#
# Everything lives under the base dir ${DLQ_CLUSTER_DIR:-/tmp/dlq-cluster}: per node
# nN/nN.conf (rendered from deploy/nats-cluster/nN.conf), nN/store/ (the JetStream store),
# nN/nats-server.log and nN/nats-server.pid. Nothing is installed or started system-wide, and
# only loopback addresses are used.
#
# Security (DLQ_CLUSTER_SECURITY, default tls): clients must use TLS and log in as one of the
# least-privilege users of deploy/nats-permissions.conf (dlq-emitter, dlq-consumer,
# dlq-console, dlq-node-a,
# dlq-operator); routes between the nodes use mutual TLS (a node's certificate must be signed
# by the cluster's CA). The first render makes, with openssl, a private CA and one node
# certificate for 127.0.0.1/localhost under pki/, and a random password per user under
# secrets/ (mode 0600); later renders reuse them. Each node's security.conf and route-tls.conf
# (included by nN.conf) and its copy of the permissions with the passwords filled in
# (mode 0600) are rendered into nN/. With DLQ_CLUSTER_SECURITY=none those files are empty: no
# TLS and no users (for tests on loopback only).
#
# Environment:
#   DLQ_CLUSTER_DIR           base dir (default /tmp/dlq-cluster)
#   DLQ_CLUSTER_BASE_PORT     client ports BASE, BASE+1, BASE+2; cluster (route) ports
#                             BASE+2000..; monitoring ports BASE+4000.. (default 14222, which
#                             gives 14222-14224, 16222-16224, 18222-18224)
#   DLQ_CLUSTER_CLIENT_PORTS  "P1 P2 P3": override the client ports one by one
#   DLQ_CLUSTER_ROUTE_PORTS   "P1 P2 P3": override the cluster ports
#   DLQ_CLUSTER_HTTP_PORTS    "P1 P2 P3": override the monitoring ports
#   DLQ_CLUSTER_SECURITY      tls (default) or none, see above
#   DLQ_CLUSTER_TIMEOUT       seconds to wait for health (default 30)
#   NATS_SERVER_BIN           nats-server binary (default: on PATH, else /usr/sbin/nats-server)
#
# The ports and base dir must be the same for every command on one cluster (they are read
# from the environment each time; `start` refuses ports some other process listens on).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NODES=(n1 n2 n3)
# The tokens in the checked-in nN.conf files that rendering replaces.
DEFAULT_CLIENT=(14222 14223 14224)
DEFAULT_ROUTE=(16222 16223 16224)
DEFAULT_HTTP=(18222 18223 18224)
DEFAULT_BASE_DIR=/tmp/dlq-cluster

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# --- settings -------------------------------------------------------------------------------

BASE="${DLQ_CLUSTER_DIR:-$DEFAULT_BASE_DIR}"
case "$BASE" in
  /*) ;;
  *) BASE="$PWD/$BASE" ;;
esac
BASE="${BASE%/}"
# The path goes into a quoted string of the NATS config.
case "$BASE" in
  *'"'* | *\\* | *'$'* | *$'\n'* | '') die "DLQ_CLUSTER_DIR must not contain quotes, backslashes, \$ or newlines: $BASE" ;;
esac

SECURITY="${DLQ_CLUSTER_SECURITY:-tls}"
case "$SECURITY" in
  tls | none) ;;
  *) die "DLQ_CLUSTER_SECURITY must be tls or none, not '$SECURITY'" ;;
esac
# The users of deploy/nats-permissions.conf and the variables that hold their passwords there.
USERS=(dlq-emitter dlq-consumer dlq-operator dlq-console dlq-node-a)
PASSWORD_VARS=(DLQ_EMITTER_PASSWORD DLQ_CONSUMER_PASSWORD DLQ_OPERATOR_PASSWORD DLQ_CONSOLE_PASSWORD DLQ_NODE_A_PASSWORD)

TIMEOUT="${DLQ_CLUSTER_TIMEOUT:-30}"
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "DLQ_CLUSTER_TIMEOUT must be a number of seconds, not '$TIMEOUT'"

# Sets PORTS to three ports: the override list, or BASE+offset, +1, +2. (Not run in a
# command substitution, so that `die` ends the script.)
port_list() { # name, override, base offset
  local name="$1" override="$2" offset="$3" base="${DLQ_CLUSTER_BASE_PORT:-14222}" p
  [[ "$base" =~ ^[0-9]+$ ]] || die "DLQ_CLUSTER_BASE_PORT must be a port number, not '$base'"
  PORTS=()
  if [ -n "$override" ]; then
    read -r -a PORTS <<<"$override"
    [ "${#PORTS[@]}" -eq 3 ] || die "$name must list three ports, got '$override'"
  else
    PORTS=($((base + offset)) $((base + offset + 1)) $((base + offset + 2)))
  fi
  for p in "${PORTS[@]}"; do
    if ! [[ "$p" =~ ^[0-9]+$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then
      die "$name: '$p' is not a port number (1-65535)"
    fi
  done
}

port_list DLQ_CLUSTER_CLIENT_PORTS "${DLQ_CLUSTER_CLIENT_PORTS:-}" 0
CLIENT=("${PORTS[@]}")
port_list DLQ_CLUSTER_ROUTE_PORTS "${DLQ_CLUSTER_ROUTE_PORTS:-}" 2000
ROUTE=("${PORTS[@]}")
port_list DLQ_CLUSTER_HTTP_PORTS "${DLQ_CLUSTER_HTTP_PORTS:-}" 4000
HTTP=("${PORTS[@]}")
ALL_PORTS=("${CLIENT[@]}" "${ROUTE[@]}" "${HTTP[@]}")
if [ "$(printf '%s\n' "${ALL_PORTS[@]}" | sort -u | wc -l)" -ne 9 ]; then
  die "the nine ports must differ: client ${CLIENT[*]}, cluster ${ROUTE[*]}, monitoring ${HTTP[*]}"
fi

find_nats() {
  if [ -n "${NATS_SERVER_BIN:-}" ]; then
    [ -x "$NATS_SERVER_BIN" ] || die "NATS_SERVER_BIN=$NATS_SERVER_BIN is not an executable"
    echo "$NATS_SERVER_BIN"
  elif command -v nats-server >/dev/null 2>&1; then
    command -v nats-server
  elif [ -x /usr/sbin/nats-server ]; then
    echo /usr/sbin/nats-server
  else
    die "nats-server not found: install it (Debian: apt-get install nats-server, or scripts/install-nats-server.sh) or set NATS_SERVER_BIN"
  fi
}

node_index() { # n1|1 -> 0
  case "$1" in
    n1 | 1) echo 0 ;;
    n2 | 2) echo 1 ;;
    n3 | 3) echo 2 ;;
    *) die "unknown node '$1' (expected n1, n2 or n3)" ;;
  esac
}

node_dir() { echo "$BASE/${NODES[$1]}"; }
conf_path() { echo "$(node_dir "$1")/${NODES[$1]}.conf"; }
log_path() { echo "$(node_dir "$1")/nats-server.log"; }
pid_path() { echo "$(node_dir "$1")/nats-server.pid"; }

# --- rendering ------------------------------------------------------------------------------

render_node() { # index
  local i="$1" name="${NODES[$1]}" src="$SCRIPT_DIR/${NODES[$1]}.conf" dst text k
  [ -f "$src" ] || die "template $src is missing"
  dst="$(conf_path "$i")"
  mkdir -p "$(node_dir "$i")/store"
  text="$(<"$src")"
  # Two passes through placeholders, so that a new port equal to another default port is
  # never replaced twice.
  for k in 0 1 2; do
    text="${text//"127.0.0.1:${DEFAULT_CLIENT[k]}"/"@@client$k@@"}"
    text="${text//"127.0.0.1:${DEFAULT_ROUTE[k]}"/"@@route$k@@"}"
    text="${text//"127.0.0.1:${DEFAULT_HTTP[k]}"/"@@http$k@@"}"
  done
  [[ "$text" == *"@@client$i@@"* && "$text" == *"@@route$i@@"* && "$text" == *"@@http$i@@"* ]] \
    || die "$src does not contain its default listen addresses (127.0.0.1:${DEFAULT_CLIENT[i]}, :${DEFAULT_ROUTE[i]}, :${DEFAULT_HTTP[i]}); was it edited?"
  [[ "$text" == *"\"$DEFAULT_BASE_DIR/$name/store\""* ]] \
    || die "$src does not contain store_dir \"$DEFAULT_BASE_DIR/$name/store\"; was it edited?"
  text="${text//"\"$DEFAULT_BASE_DIR/"/"\"@@base@@/"}"
  for k in 0 1 2; do
    text="${text//"@@client$k@@"/"127.0.0.1:${CLIENT[k]}"}"
    text="${text//"@@route$k@@"/"127.0.0.1:${ROUTE[k]}"}"
    text="${text//"@@http$k@@"/"127.0.0.1:${HTTP[k]}"}"
  done
  text="${text//"@@base@@"/"$BASE"}"
  {
    echo "# Rendered by cluster.sh from $src: client 127.0.0.1:${CLIENT[i]},"
    echo "# cluster 127.0.0.1:${ROUTE[i]}, monitoring 127.0.0.1:${HTTP[i]}, store under $BASE/$name."
    echo "# (The port table in the comments below lists the defaults.) Do not edit: re-rendered on start."
    echo
    printf '%s\n' "$text"
  } >"$dst.tmp"
  mv -f "$dst.tmp" "$dst"
}

# The cluster's private CA and the node certificate (for clients and routes), made once.
ensure_pki() {
  local pki="$BASE/pki" ext
  [ -f "$pki/ca.pem" ] && [ -f "$pki/node.pem" ] && [ -f "$pki/node.key" ] && return 0
  command -v openssl >/dev/null 2>&1 || die "openssl is needed to make the cluster's certificates (Debian: apt-get install openssl), or set DLQ_CLUSTER_SECURITY=none"
  mkdir -p "$pki"
  chmod 700 "$pki"
  ext="$pki/node.ext"
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" >"$ext"
  (
    umask 077
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
      -subj "/CN=dlq cluster CA" -keyout "$pki/ca.key" -out "$pki/ca.pem" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/CN=dlq cluster node" -keyout "$pki/node.key" -out "$pki/node.csr" 2>/dev/null
    openssl x509 -req -in "$pki/node.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" \
      -CAcreateserial -days 825 -extfile "$ext" -out "$pki/node.pem" 2>/dev/null
  ) || die "openssl could not make the certificates under $pki"
  chmod 644 "$pki/ca.pem" "$pki/node.pem"
  rm -f "$pki/node.csr" "$ext"
}

# A random password per user, made once, readable by the owner only.
ensure_secrets() {
  local dir="$BASE/secrets" user
  mkdir -p "$dir"
  chmod 700 "$dir"
  for user in "${USERS[@]}"; do
    [ -s "$dir/$user.password" ] && continue
    (umask 077 && openssl rand -hex 24 >"$dir/$user.password") \
      || die "cannot write $dir/$user.password"
  done
}

# nN/security.conf (client TLS and the users), nN/route-tls.conf (mutual TLS between nodes)
# and nN/nats-permissions.conf (the users, passwords filled in), or empty files without TLS.
render_security() { # index
  local dir pki="$BASE/pki" text k pw
  dir="$(node_dir "$1")"
  if [ "$SECURITY" = none ]; then
    : >"$dir/security.conf"
    : >"$dir/route-tls.conf"
    rm -f "$dir/nats-permissions.conf"
    return 0
  fi
  text="$(<"$SCRIPT_DIR/../nats-permissions.conf")"
  for k in "${!USERS[@]}"; do
    pw="$(<"$BASE/secrets/${USERS[k]}.password")"
    text="${text//"\$${PASSWORD_VARS[k]}"/"\"$pw\""}"
  done
  (umask 077 && printf '%s\n' "# Rendered by cluster.sh from deploy/nats-permissions.conf with the passwords of $BASE/secrets/." "$text" >"$dir/nats-permissions.conf")
  {
    echo "# Rendered by cluster.sh (DLQ_CLUSTER_SECURITY=tls). Clients must use TLS and log in."
    echo "tls {"
    echo "  cert_file: \"$pki/node.pem\""
    echo "  key_file: \"$pki/node.key\""
    echo "  timeout: 2"
    echo "}"
    echo "include \"nats-permissions.conf\""
  } >"$dir/security.conf"
  {
    echo "# Rendered by cluster.sh: routes use mutual TLS; only nodes with a certificate of the"
    echo "# cluster's CA ($pki/ca.pem) may join."
    echo "tls {"
    echo "  cert_file: \"$pki/node.pem\""
    echo "  key_file: \"$pki/node.key\""
    echo "  ca_file: \"$pki/ca.pem\""
    echo "  verify: true"
    echo "  timeout: 2"
    echo "}"
  } >"$dir/route-tls.conf"
}

render_all() {
  mkdir -p "$BASE" || die "cannot create base dir $BASE"
  local i out
  if [ "$SECURITY" = tls ]; then
    ensure_pki
    ensure_secrets
  fi
  for i in 0 1 2; do
    render_node "$i"
    render_security "$i"
    if ! out="$("$NATS" -c "$(conf_path "$i")" -t 2>&1)"; then
      die "nats-server rejects the rendered config $(conf_path "$i"): $out"
    fi
  done
}

# --- probes ---------------------------------------------------------------------------------

# GET http://127.0.0.1:PORT/PATH; prints "STATUS BODY" on one line (newlines removed), or
# nothing if the connection failed. Bounded to 2 s.
http_get() {
  local port="$1" path="$2" out
  if command -v curl >/dev/null 2>&1; then
    out="$(curl -s -m 2 -w '\n%{http_code}' "http://127.0.0.1:$port$path" 2>/dev/null)" || return 0
    printf '%s %s\n' "${out##*$'\n'}" "$(printf '%s' "${out%$'\n'*}" | tr -d '\n')"
  else
    # shellcheck disable=SC2016 # the inner script expands its own arguments
    out="$(timeout 2 bash -c '
      exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
      printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" "$2" >&3
      cat <&3' _ "$port" "$path" 2>/dev/null)" || return 0
    local status
    status="$(printf '%s' "${out%%$'\r'*}" | awk '{print $2}')"
    printf '%s %s\n' "$status" "$(printf '%s' "${out#*$'\r\n\r\n'}" | tr -d '\r\n')"
  fi
}

port_in_use() { # true if something accepts connections on 127.0.0.1:PORT
  # shellcheck disable=SC2016 # the inner script expands its own argument
  timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# The pid of the node's nats-server if it is running (checked against its command line, so a
# recycled pid is never taken for ours); nothing otherwise.
node_pid() {
  local i="$1" pidfile pid
  pidfile="$(pid_path "$i")"
  [ -f "$pidfile" ] || return 0
  pid="$(<"$pidfile")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$(conf_path "$i")"; then
    # A zombie is not running.
    if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; then
      echo "$pid"
    fi
  fi
}

healthz_ok() { # index
  local reply
  reply="$(http_get "${HTTP[$1]}" /healthz)"
  [ "${reply%% *}" = 200 ]
}

meta_leader() { # index -> prints the meta leader's name as this node sees it, or nothing
  local reply
  reply="$(http_get "${HTTP[$1]}" /jsz)"
  [ "${reply%% *}" = 200 ] || return 0
  if command -v jq >/dev/null 2>&1; then
    printf '%s' "${reply#* }" | jq -r '.meta_cluster.leader // empty' 2>/dev/null || true
  else
    printf '%s' "${reply#* }" | grep -o '"leader": *"[^"]*"' | head -n 1 | sed 's/.*"\([^"]*\)"$/\1/' || true
  fi
}

log_tail() { # index
  local log
  log="$(log_path "$1")"
  echo "--- last lines of $log ---" >&2
  tail -n 20 "$log" >&2 2>/dev/null || echo "(no log)" >&2
}

# Waits until every node in the list runs, answers /healthz with 200 and knows a meta leader.
wait_healthy() { # indexes...
  local deadline=$((SECONDS + TIMEOUT)) i pending leader
  while :; do
    pending=()
    for i in "$@"; do
      if [ -z "$(node_pid "$i")" ]; then
        log_tail "$i"
        die "${NODES[i]} exited during startup (see its log above: $(log_path "$i"))"
      fi
      leader="$(meta_leader "$i")"
      if ! healthz_ok "$i" || [ -z "$leader" ]; then
        pending+=("${NODES[i]}")
      fi
    done
    [ "${#pending[@]}" -eq 0 ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      for i in "$@"; do log_tail "$i"; done
      die "not healthy after ${TIMEOUT}s: ${pending[*]} (no /healthz 200 on the monitoring port or no JetStream meta leader; the other nodes must be running for a leader to be elected; logs above)"
    fi
    sleep 0.2
  done
}

# --- commands -------------------------------------------------------------------------------

launch() { # index; starts the node in the background if it does not run
  local i="$1" pid p log
  pid="$(node_pid "$i")"
  if [ -n "$pid" ]; then
    echo "${NODES[i]}: already running (pid $pid)"
    return 0
  fi
  for p in "${CLIENT[i]}" "${ROUTE[i]}" "${HTTP[i]}"; do
    if port_in_use "$p"; then
      die "${NODES[i]}: port 127.0.0.1:$p is already in use by another process; choose other ports (DLQ_CLUSTER_BASE_PORT or DLQ_CLUSTER_*_PORTS)"
    fi
  done
  log="$(log_path "$i")"
  echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) cluster.sh starts ${NODES[i]} ===" >>"$log"
  # setsid: the node does not share the caller's terminal session, so Ctrl-C in that shell
  # does not reach it. It execs, so $! is the server's pid.
  setsid "$NATS" -c "$(conf_path "$i")" </dev/null >>"$log" 2>&1 &
  pid=$!
  echo "$pid" >"$(pid_path "$i")"
  # Until the forked shell has exec'd nats-server, its command line is not the node's yet.
  local deadline=$((SECONDS + 5))
  while [ -z "$(node_pid "$i")" ]; do
    if ! kill -0 "$pid" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
      log_tail "$i"
      die "${NODES[i]} did not start (see its log above: $log)"
    fi
    sleep 0.05
  done
  echo "${NODES[i]}: started (pid $pid), client $(scheme)://127.0.0.1:${CLIENT[i]}, monitoring http://127.0.0.1:${HTTP[i]}, log $log"
}

stop_node() { # index; graceful stop, SIGKILL after 10 s
  local i="$1" pid deadline
  pid="$(node_pid "$i")"
  if [ -z "$pid" ]; then
    rm -f "$(pid_path "$i")"
    echo "${NODES[i]}: not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 10))
  while [ -n "$(node_pid "$i")" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "${NODES[i]}: still running 10 s after SIGTERM; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
      break
    fi
    sleep 0.1
  done
  rm -f "$(pid_path "$i")"
  echo "${NODES[i]}: stopped (pid $pid)"
}

cmd_start() {
  render_all
  local i
  for i in 0 1 2; do launch "$i"; done
  wait_healthy 0 1 2
  echo "cluster healthy: meta leader $(meta_leader 0); client URLs: $(cmd_urls | paste -sd, -)"
}

cmd_stop() {
  local i
  for i in 0 1 2; do stop_node "$i"; done
}

cmd_status() {
  local i pid health leader all_ok=0
  for i in 0 1 2; do
    pid="$(node_pid "$i")"
    if [ -z "$pid" ]; then
      echo "${NODES[i]}: stopped (client 127.0.0.1:${CLIENT[i]}, monitoring 127.0.0.1:${HTTP[i]})"
      all_ok=1
      continue
    fi
    if healthz_ok "$i"; then health=healthy; else health=unhealthy; all_ok=1; fi
    leader="$(meta_leader "$i")"
    [ -n "$leader" ] || all_ok=1
    echo "${NODES[i]}: running (pid $pid), $health, meta leader ${leader:-none}, client $(scheme)://127.0.0.1:${CLIENT[i]}, monitoring http://127.0.0.1:${HTTP[i]}"
  done
  return "$all_ok"
}

cmd_kill() {
  local i pid
  i="$(node_index "$1")"
  pid="$(node_pid "$i")"
  [ -n "$pid" ] || die "${NODES[i]} is not running"
  kill -KILL "$pid"
  local deadline=$((SECONDS + 10))
  while [ -n "$(node_pid "$i")" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "${NODES[i]} (pid $pid) still alive 10 s after SIGKILL"
    sleep 0.05
  done
  rm -f "$(pid_path "$i")"
  echo "${NODES[i]}: killed (SIGKILL, pid $pid)"
}

cmd_restart() {
  local i
  i="$(node_index "$1")"
  stop_node "$i" >/dev/null
  render_all
  launch "$i"
  wait_healthy "$i"
  echo "${NODES[i]}: healthy, meta leader $(meta_leader "$i")"
}

cmd_run() {
  local i
  i="$(node_index "$1")"
  render_all
  exec "$NATS" -c "$(conf_path "$i")"
}

scheme() { if [ "$SECURITY" = tls ]; then echo tls; else echo nats; fi; }

cmd_credentials() {
  local k
  if [ "$SECURITY" = none ]; then
    echo "DLQ_CLUSTER_SECURITY=none: no TLS and no users"
    return 0
  fi
  echo "CA certificate (bus.tls.ca, --tlsca, NATS_CA): $BASE/pki/ca.pem"
  for k in "${!USERS[@]}"; do
    echo "user ${USERS[k]}: password in $BASE/secrets/${USERS[k]}.password"
  done
  echo "e.g. NATS_USER=dlq-emitter NATS_PASSWORD=\"\$(cat $BASE/secrets/dlq-emitter.password)\" NATS_CA=$BASE/pki/ca.pem dlq --config deploy/dlq.cluster.yml demo"
}

cmd_urls() {
  local i
  for i in 0 1 2; do echo "$(scheme)://127.0.0.1:${CLIENT[i]}"; done
}

[ "$#" -ge 1 ] || usage
command="$1"
shift
case "$command" in
  start | stop | status | render | urls | credentials) [ "$#" -eq 0 ] || usage ;;
  kill | restart | run) [ "$#" -eq 1 ] || usage ;;
  -h | --help | help) usage ;;
  *) echo "cluster.sh: unknown command '$command'" >&2 && usage ;;
esac
case "$command" in
  start | restart | render | run) NATS="$(find_nats)" ;;
esac

case "$command" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  kill) cmd_kill "$1" ;;
  restart) cmd_restart "$1" ;;
  render)
    render_all
    for i in 0 1 2; do conf_path "$i"; done
    ;;
  run) cmd_run "$1" ;;
  urls) cmd_urls ;;
  credentials) cmd_credentials ;;
esac
