#!/usr/bin/env bash
# A real Kubernetes control plane (v1.37.2 by default, K8S_VERSION=v1.35.4 ...) on 127.0.0.1 for tests: etcd + kube-apiserver
# (+ kube-scheduler, + kube-controller-manager on request). No kubelet: nodes are plain API objects.
#
#   scripts/k8s-control-plane.sh up DIR [--with-scheduler CONFIG.yaml] [--with-controller-manager]
#   scripts/k8s-control-plane.sh scheduler DIR CONFIG.yaml [NAME]   start one more kube-scheduler
#   scripts/k8s-control-plane.sh controller-manager DIR              start kube-controller-manager
#   scripts/k8s-control-plane.sh down DIR
#
# `up` writes DIR/kubeconfig (admin token, system:masters), DIR/env (ports, pids, token; shell syntax),
# logs to DIR/*.log, and returns once /readyz answers ok. `down` stops everything it started and removes
# DIR's state (logs are kept).
# Binaries: K8S_VERSION (default v1.37.2) or K8S_BIN_DIR (default: that version's cache of scripts/test-deps.sh),
# ETCD_BIN (default: the etcd 3.6 that scripts/test-deps.sh builds).
# Ports are free ones picked at random; override with ETCD_CLIENT_PORT, ETCD_PEER_PORT, APISERVER_PORT.
# APISERVER_EXTRA_ARGS: more kube-apiserver flags (e.g. --feature-gates=... --runtime-config=...).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_VERSION="${K8S_VERSION:-v1.37.2}"
K8S_BIN_DIR="${K8S_BIN_DIR:-$("$HERE/test-deps.sh" bindir "$K8S_VERSION")}"
ETCD_BIN="${ETCD_BIN:-$("$HERE/test-deps.sh" path etcd)}"
READY_TIMEOUT="${READY_TIMEOUT:-90}"

log() { printf '[k8s-control-plane %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[k8s-control-plane] ERROR: %s\n' "$*" >&2; exit 1; }

# Ports come from below the kernel's ephemeral range (ip_local_port_range), so neither outgoing connections
# nor other tests' bind(0) ports can take them between the pick and the bind; a port any socket uses
# (any state) is skipped. A bind that still fails is retried with fresh ports (see cmd_up / start_scheduler).
EPHEMERAL_LOW=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
PORT_LOW=${PORT_LOW:-20000}
PORT_HIGH=${PORT_HIGH:-$(( EPHEMERAL_LOW > PORT_LOW + 1000 ? EPHEMERAL_LOW - 1 : 32767 ))}
port_in_use() {
  if command -v ss >/dev/null 2>&1; then
    ss -Htan "( sport = :$1 )" 2>/dev/null | grep -q . && return 0
    return 1
  fi
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
TAKEN=" "
free_port() {
  local p i
  for i in $(seq 1 500); do
    p=$(( PORT_LOW + (RANDOM * 32768 + RANDOM) % (PORT_HIGH - PORT_LOW + 1) ))
    case "$TAKEN" in *" $p "*) continue ;; esac
    if ! port_in_use "$p"; then TAKEN="$TAKEN$p "; echo "$p"; return 0; fi
  done
  die "no free port found in $PORT_LOW-$PORT_HIGH"
}

# start NAME LOGFILE CMD...: detached from the caller (own session, no inherited stdio), pid in DIR/NAME.pid
start() {
  local name=$1 logf=$2; shift 2
  setsid "$@" </dev/null >"$logf" 2>&1 &
  echo $! >"$DIR/$name.pid"
  echo $!
}

alive() { kill -0 "$1" 2>/dev/null; }

# Only signal a pid whose command line mentions DIR (guards against pid reuse).
ours() { [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$DIR"; }

stop_pid() {
  local pid=$1 i
  alive "$pid" && ours "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do alive "$pid" || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}

show_log() { echo "---- last lines of $1 ----" >&2; tail -30 "$1" >&2 || true; }
port_clash() { grep -q 'address already in use' "$1" 2>/dev/null; }

make_certs() {
  local pki=$DIR/pki
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=gpucluster-test-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1\nextendedKeyUsage=serverAuth\n' >"$pki/apiserver.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

write_kubeconfig() {
  cat >"$DIR/kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: gpucluster-test
  cluster:
    server: $API_URL
    certificate-authority: $DIR/pki/ca.crt
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: gpucluster-test
  context:
    cluster: gpucluster-test
    user: admin
current-context: gpucluster-test
KCFG
  chmod 600 "$DIR/kubeconfig"
}

# wait_http_ok URL PID [curl args...]: 0 when URL answers "ok"; 1 when PID exits or READY_TIMEOUT passes
wait_http_ok() {
  local url=$1 pid=$2; shift 2
  local deadline=$((SECONDS + READY_TIMEOUT))
  while [ $SECONDS -lt $deadline ]; do
    alive "$pid" || { WAIT_ERR="exited during startup"; return 1; }
    [ "$(curl -s --max-time 2 "$@" "$url" 2>/dev/null || true)" = "ok" ] && return 0
    sleep 0.3
  done
  WAIT_ERR="not ready after ${READY_TIMEOUT}s ($url)"
  return 1
}

load_env() {
  [ -f "$DIR/env" ] || die "$DIR/env not found: run '$0 up $DIR' first"
  # shellcheck disable=SC1091
  . "$DIR/env"
}

# A copy of the user's KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) with what a test cluster needs
# filled in when absent: the kubeconfig and no leader election. Text edits only (top-level block YAML); keys the
# user set are kept. kube-scheduler serves /healthz, /readyz and /metrics on its secure port only (127.0.0.1,
# a free port); /healthz needs no credentials, /metrics the admin token.
start_scheduler() {  # CONFIG NAME
  local config=$1 name=$2 cfg sport pid
  [ -f "$config" ] || die "scheduler config $config not found"
  [ -x "$K8S_BIN_DIR/kube-scheduler" ] || die "kube-scheduler not found in $K8S_BIN_DIR (run scripts/test-deps.sh install)"
  cfg="$DIR/scheduler-$name.yaml"
  cp "$config" "$cfg"
  [ -n "$(tail -c1 "$cfg")" ] && echo >>"$cfg"
  if ! grep -q '^[[:space:]]*kubeconfig:' "$cfg"; then
    if grep -q '^clientConnection:' "$cfg"; then
      sed -i "s|^clientConnection:.*|clientConnection:\n  kubeconfig: $DIR/kubeconfig|" "$cfg"
    else
      printf 'clientConnection:\n  kubeconfig: %s\n' "$DIR/kubeconfig" >>"$cfg"
    fi
  fi
  grep -q '^leaderElection:' "$cfg" || printf 'leaderElection:\n  leaderElect: false\n' >>"$cfg"
  local attempt
  for attempt in 1 2 3; do
    sport=$(free_port); TAKEN="$TAKEN$sport "
    pid=$(start "scheduler-$name" "$DIR/scheduler-$name.log" "$K8S_BIN_DIR/kube-scheduler" \
      --config "$cfg" --bind-address 127.0.0.1 --secure-port "$sport" \
      --authentication-kubeconfig "$DIR/kubeconfig" --authorization-kubeconfig "$DIR/kubeconfig" -v 2)
    wait_http_ok "https://127.0.0.1:$sport/healthz" "$pid" --insecure && break
    stop_pid "$pid"; rm -f "$DIR/scheduler-$name.pid"
    if [ "$attempt" -lt 3 ] && port_clash "$DIR/scheduler-$name.log"; then
      log "kube-scheduler $name: port clash, retrying with another port"
      continue
    fi
    show_log "$DIR/scheduler-$name.log"; die "kube-scheduler $name $WAIT_ERR"
  done
  {
    echo "SCHEDULER_${name//[^A-Za-z0-9]/_}_PID=$pid"
    echo "SCHEDULER_${name//[^A-Za-z0-9]/_}_PORT=$sport"
  } >>"$DIR/env"
  log "kube-scheduler $name ready (pid $pid, healthz/metrics https://127.0.0.1:$sport)"
  echo "SCHEDULER_PID=$pid"
  echo "SCHEDULER_PORT=$sport"
  echo "SCHEDULER_HEALTHZ_URL=https://127.0.0.1:$sport/healthz"
  echo "SCHEDULER_METRICS_URL=https://127.0.0.1:$sport/metrics"
  echo "SCHEDULER_LOG=$DIR/scheduler-$name.log"
}

# kube-controller-manager with every controller but node-lifecycle (it would taint nodes that have no kubelet)
# and node IPAM: Jobs, ReplicaSets, garbage collection, namespace deletion, ServiceAccounts ...; healthz on its
# secure port (127.0.0.1, a free port).
start_controller_manager() {
  [ -x "$K8S_BIN_DIR/kube-controller-manager" ] || die "kube-controller-manager not found in $K8S_BIN_DIR"
  local pid port attempt
  for attempt in 1 2 3; do
    port=$(free_port); TAKEN="$TAKEN$port "
    pid=$(start kube-controller-manager "$DIR/kube-controller-manager.log" "$K8S_BIN_DIR/kube-controller-manager" \
      --kubeconfig "$DIR/kubeconfig" --authentication-kubeconfig "$DIR/kubeconfig" --authorization-kubeconfig "$DIR/kubeconfig" \
      --controllers '*,-node-ipam-controller,-node-lifecycle-controller' \
      --service-account-private-key-file "$DIR/pki/sa.key" --root-ca-file "$DIR/pki/ca.crt" \
      --use-service-account-credentials=false --leader-elect=false \
      --bind-address 127.0.0.1 --secure-port "$port" --v 1)
    wait_http_ok "https://127.0.0.1:$port/healthz" "$pid" --insecure && break
    stop_pid "$pid"; rm -f "$DIR/kube-controller-manager.pid"
    if [ "$attempt" -lt 3 ] && port_clash "$DIR/kube-controller-manager.log"; then
      log "kube-controller-manager: port clash, retrying with another port"; continue
    fi
    show_log "$DIR/kube-controller-manager.log"; die "kube-controller-manager $WAIT_ERR"
  done
  { echo "CONTROLLER_MANAGER_PID=$pid"; echo "CONTROLLER_MANAGER_PORT=$port"; } >>"$DIR/env"
  log "kube-controller-manager ready (pid $pid, healthz https://127.0.0.1:$port/healthz)"
  echo "CONTROLLER_MANAGER_PID=$pid"
  echo "CONTROLLER_MANAGER_PORT=$port"
  echo "CONTROLLER_MANAGER_LOG=$DIR/kube-controller-manager.log"
}

PORTS_FROM_ENV="${ETCD_CLIENT_PORT:-}${ETCD_PEER_PORT:-}${APISERVER_PORT:-}"
ENV_ETCD_CLIENT_PORT=${ETCD_CLIENT_PORT:-}; ENV_ETCD_PEER_PORT=${ETCD_PEER_PORT:-}; ENV_APISERVER_PORT=${APISERVER_PORT:-}

# One try at etcd + kube-apiserver. On failure: returns 1 with UP_ERR (message) and UP_LOG (log to show).
# (Runs as `up_once && ...`, where set -e is off: every step checks for itself.)
up_once() {
  UP_LOG=/dev/null
  ETCD_CLIENT_PORT=${ENV_ETCD_CLIENT_PORT:-$(free_port)} || { UP_ERR="no free port"; return 2; }
  TAKEN="$TAKEN$ETCD_CLIENT_PORT "
  ETCD_PEER_PORT=${ENV_ETCD_PEER_PORT:-$(free_port)} || { UP_ERR="no free port"; return 2; }
  TAKEN="$TAKEN$ETCD_PEER_PORT "
  APISERVER_PORT=${ENV_APISERVER_PORT:-$(free_port)} || { UP_ERR="no free port"; return 2; }
  TAKEN="$TAKEN$APISERVER_PORT "
  API_URL="https://127.0.0.1:$APISERVER_PORT"
  TOKEN=$(openssl rand -hex 24) || { UP_ERR="openssl rand failed"; return 2; }
  rm -rf "$DIR/pki"
  make_certs || { UP_ERR="certificate generation failed"; return 2; }
  echo "$TOKEN,admin,admin,system:masters" >"$DIR/tokens.csv" || { UP_ERR="cannot write $DIR"; return 2; }
  chmod 600 "$DIR/tokens.csv"

  ETCD_PID=$(start etcd "$DIR/etcd.log" "$ETCD_BIN" --name default --data-dir "$DIR/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" \
    --quota-backend-bytes 1073741824)
  local deadline=$((SECONDS + READY_TIMEOUT))
  UP_LOG=$DIR/etcd.log
  until curl -sf --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" 2>/dev/null | grep -q '"health":"true"'; do
    alive "$ETCD_PID" || { UP_ERR="etcd exited during startup"; return 1; }
    [ $SECONDS -lt $deadline ] || { UP_ERR="etcd not healthy after ${READY_TIMEOUT}s"; return 1; }
    sleep 0.2
  done

  APISERVER_PID=$(start kube-apiserver "$DIR/kube-apiserver.log" "$K8S_BIN_DIR/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
    --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$DIR/pki/apiserver.crt" --tls-private-key-file "$DIR/pki/apiserver.key" \
    --client-ca-file "$DIR/pki/ca.crt" --token-auth-file "$DIR/tokens.csv" --anonymous-auth=false \
    --authorization-mode RBAC,Node \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --api-audiences https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$DIR/pki/sa.pub" --service-account-signing-key-file "$DIR/pki/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 \
    --disable-admission-plugins ServiceAccount,TaintNodesByCondition \
    --profiling=false --v 1 ${APISERVER_EXTRA_ARGS:-})
  cat >"$DIR/env" <<ENV
DIR=$DIR
API_URL=$API_URL
APISERVER_PORT=$APISERVER_PORT
ETCD_CLIENT_PORT=$ETCD_CLIENT_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
ETCD_PID=$ETCD_PID
APISERVER_PID=$APISERVER_PID
TOKEN=$TOKEN
KUBECONFIG=$DIR/kubeconfig
CA_CERT=$DIR/pki/ca.crt
K8S_BIN_DIR=$K8S_BIN_DIR
K8S_VERSION=$K8S_VERSION
ENV
  chmod 600 "$DIR/env"
  write_kubeconfig
  UP_LOG=$DIR/kube-apiserver.log
  wait_http_ok "$API_URL/readyz" "$APISERVER_PID" --cacert "$DIR/pki/ca.crt" -H "Authorization: Bearer $TOKEN" \
    || { UP_ERR="kube-apiserver $WAIT_ERR"; return 1; }
}

cmd_up() {
  local sched_config="" with_cm=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --with-scheduler) sched_config=$(realpath "$2"); shift 2 ;;
      --with-controller-manager) with_cm=1; shift ;;
      *) die "unknown option $1" ;;
    esac
  done
  local b
  for b in kube-apiserver kube-scheduler kube-controller-manager; do
    [ -x "$K8S_BIN_DIR/$b" ] || die "$b not found in $K8S_BIN_DIR: run 'sudo $HERE/test-deps.sh install'"
  done
  [ -x "$ETCD_BIN" ] || die "etcd not found: run 'sudo $HERE/test-deps.sh install'"
  if [ -f "$DIR/env" ]; then
    # shellcheck disable=SC1091
    ( . "$DIR/env"; alive "${APISERVER_PID:-0}" ) && die "a control plane already runs from $DIR (down it first)"
  fi
  local t0=$SECONDS attempt
  mkdir -p "$DIR"
  for attempt in 1 2 3; do
    local rc=0
    up_once || rc=$?
    [ "$rc" = 0 ] && break
    local failed_log=$UP_LOG
    stop_pid "$(cat "$DIR/kube-apiserver.pid" 2>/dev/null || echo 0)"
    stop_pid "$(cat "$DIR/etcd.pid" 2>/dev/null || echo 0)"
    rm -rf "$DIR/etcd-data" "$DIR"/*.pid
    if [ "$rc" = 1 ] && [ "$attempt" -lt 3 ] && port_clash "$failed_log" && [ -z "$PORTS_FROM_ENV" ]; then
      log "port clash ($(basename "$failed_log" .log)), retrying with other ports"
      continue
    fi
    show_log "$failed_log"
    cmd_down >/dev/null 2>&1 || true
    die "$UP_ERR"
  done
  log "kube-apiserver ready at $API_URL (etcd pid $ETCD_PID, apiserver pid $APISERVER_PID) in $((SECONDS - t0)) s"

  [ "$with_cm" = 1 ] && start_controller_manager >/dev/null
  if [ -n "$sched_config" ]; then start_scheduler "$sched_config" default >/dev/null; fi
  echo "KUBECONFIG=$DIR/kubeconfig"
  echo "API_URL=$API_URL"
}

cmd_down() {
  local f pid
  # schedulers and controller-manager first, then the apiserver, etcd last
  for f in "$DIR"/scheduler-*.pid "$DIR/kube-controller-manager.pid" "$DIR/kube-apiserver.pid" "$DIR/etcd.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f"); stop_pid "$pid"; rm -f "$f"
  done
  rm -rf "$DIR/etcd-data" "$DIR/pki" "$DIR/tokens.csv" "$DIR/kubeconfig" "$DIR/env" "$DIR"/scheduler-*.yaml
  log "stopped; logs kept in $DIR"
}

[ $# -ge 2 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
CMD=$1; DIR=$(realpath -m "$2"); shift 2
case "$CMD" in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  scheduler)
    [ $# -ge 1 ] || die "usage: $0 scheduler DIR CONFIG.yaml [NAME]"
    load_env; API_URL=$API_URL; start_scheduler "$(realpath "$1")" "${2:-extra$RANDOM}" ;;
  controller-manager)
    load_env
    if [ -n "${CONTROLLER_MANAGER_PID:-}" ] && alive "$CONTROLLER_MANAGER_PID"; then
      die "kube-controller-manager already runs for $DIR (pid $CONTROLLER_MANAGER_PID)"
    fi
    start_controller_manager ;;
  *) die "unknown command $CMD (up|down|scheduler|controller-manager)" ;;
esac
