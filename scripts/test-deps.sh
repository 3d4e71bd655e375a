#!/usr/bin/env bash
# Install the real services the integration tests need, on Debian 12 (bookworm), as root.
#
#   scripts/test-deps.sh install        apt packages (Prometheus, Chromium, podman ...), then builds from Go modules,
#                                       once per version, cached outside the repository:
#                                         kube-apiserver, kube-scheduler, kube-controller-manager, kubectl
#                                           at every version of K8S_VERSIONS (default: v1.37.2 v1.35.4),
#                                         etcd v3.6.17 and helm v4.3.2
#   scripts/test-deps.sh packages       only the apt packages
#   scripts/test-deps.sh check          exit 0 when everything is there, 1 otherwise (prints what is missing)
#   scripts/test-deps.sh bindir [VER]   directory of the Kubernetes binaries of VER (default: the first version)
#   scripts/test-deps.sh path NAME      the cached binary NAME (etcd, helm, or kube-* / kubectl of the first version)
#   scripts/test-deps.sh versions       the Kubernetes versions the tests run on, one a line
#
# Idempotent: a second run only checks (about a second). Runs are serialised with a lock. A binary is written
# by a rename, so processes still running the old file keep it.
# Cache: ${GPUCLUSTER_CACHE:-/var/cache/gpucluster}/k8s-vX.Y.Z/bin, etcd-vX/bin, helm-vX/bin. The Go module cache
# and build cache are Go's own (GOMODCACHE, GOCACHE), so a second version reuses what the first compiled.
set -euo pipefail

CACHE="${GPUCLUSTER_CACHE:-/var/cache/gpucluster}"
read -r -a K8S_VERSIONS <<<"${K8S_VERSIONS:-v1.37.2 v1.35.4}"
K8S_BINS=(kube-apiserver kube-scheduler kube-controller-manager kubectl)
ETCD_VERSION="v3.6.17"
HELM_VERSION="v4.3.2"
GO_MIN="1.26.0"          # what k8s.io/kubernetes v1.37.2, etcd v3.6.17 and helm v4.3.2 declare in their go.mod
# Bumped when the way a binary is built changes: a binary built by another recipe counts as missing.
RECIPE=1
APT_PKGS=(rsync openssl curl prometheus chromium chromium-driver mmdebstrap podman runc)
# mmdebstrap, podman, runc: scripts/build-image.sh (the image test) makes a Debian base and builds and runs the
# image; runc because crun refuses hybrid cgroups.
LOCK_FILE="${GPUCLUSTER_DEPS_LOCK:-/var/lock/gpucluster-test-deps.lock}"

log() { printf '[test-deps %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[test-deps] ERROR: %s\n' "$*" >&2; exit 1; }

SUDO=""
need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else die "run as root (or install sudo)"; fi
  fi
}

k8s_dir() { echo "$CACHE/k8s-$1"; }
etcd_bin() { echo "$CACHE/etcd-$ETCD_VERSION/bin/etcd"; }
helm_bin() { echo "$CACHE/helm-$HELM_VERSION/bin/helm"; }
stamp() { echo "recipe $RECIPE $1"; }   # what BIN.built holds beside each binary

built() {  # BIN_PATH WHAT: 0 when BIN_PATH exists and was built by this recipe for WHAT
  [ -x "$1" ] && [ "$(cat "$1.built" 2>/dev/null)" = "$(stamp "$2")" ]
}

missing_pkgs() {
  local p
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

missing_bins() {  # one "WHAT BINARY" line per binary to build
  local v b
  for v in "${K8S_VERSIONS[@]}"; do
    for b in "${K8S_BINS[@]}"; do built "$(k8s_dir "$v")/bin/$b" "k8s $v" || echo "k8s-$v $b"; done
  done
  built "$(etcd_bin)" "etcd $ETCD_VERSION" || echo "etcd-$ETCD_VERSION etcd"
  built "$(helm_bin)" "helm $HELM_VERSION" || echo "helm-$HELM_VERSION helm"
}

# ------------------------------------------------------------------------------------------------ apt packages
stop_system_prometheus() {  # the prometheus package starts a system service on install; tests start their own
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  else
    [ -x /etc/init.d/prometheus ] && $SUDO /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    command -v update-rc.d >/dev/null 2>&1 && $SUDO update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
  if pgrep -x prometheus -u prometheus >/dev/null 2>&1; then
    log "stopping system prometheus (user prometheus)"
    $SUDO pkill -x -u prometheus prometheus || true
  fi
}

install_pkgs() {
  local missing
  missing=$(missing_pkgs | tr '\n' ' ')
  if [ -z "${missing// /}" ] && [ "${FORCE_APT_UPDATE:-0}" != 1 ]; then
    log "apt packages already installed: ${APT_PKGS[*]}"
    stop_system_prometheus
    return
  fi
  log "apt-get update"
  $SUDO apt-get update -q
  log "apt-get install --no-install-recommends $missing"
  local policy_created=0  # keep maintainer scripts from starting services (prometheus) while installing
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    policy_created=1
  fi
  # shellcheck disable=SC2086
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing || {
    [ "$policy_created" = 1 ] && $SUDO rm -f /usr/sbin/policy-rc.d; die "apt-get install failed"; }
  [ "$policy_created" = 1 ] && $SUDO rm -f /usr/sbin/policy-rc.d
  stop_system_prometheus
}

# ------------------------------------------------------------------------------------------------ Go builds
GO="${GO:-go}"
go_env() {  # the environment of every Go command here
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
  command -v "$GO" >/dev/null 2>&1 || die "no Go toolchain ($GO): Go $GO_MIN or newer is needed (GO=/path/to/go)"
  local have
  have=$("$GO" env GOVERSION | sed 's/^go//')
  [ "$(printf '%s\n%s\n' "$GO_MIN" "$have" | sort -V | head -1)" = "$GO_MIN" ] \
    || die "$GO is Go $have; the modules need Go $GO_MIN or newer (GOTOOLCHAIN=local: no toolchain is downloaded)"
}

# install_bin SRC DEST WHAT: put a built binary in place by a rename and record the recipe beside it
install_bin() {
  $SUDO mkdir -p "$(dirname "$2")"
  $SUDO install -m 0755 "$1" "$2.new"
  $SUDO mv -f "$2.new" "$2"
  stamp "$3" | $SUDO tee "$2.built" >/dev/null
}

# The k8s.io/kubernetes module keeps its staging modules (k8s.io/api, k8s.io/client-go ...) as `replace
# k8s.io/X => ./staging/src/k8s.io/X` lines, which Go ignores in a module that depends on it. The wrapper module
# here requires k8s.io/kubernetes at the version and replaces each of those modules (the list read from that
# version's own go.mod) with its published tag v0.MINOR.PATCH; `go get` of the commands then fills go.sum.
build_k8s() {  # VERSION BINARY...
  local v=$1; shift
  local dir src minor patch kmod start b ld
  dir=$(k8s_dir "$v"); src="$dir/src"
  minor=$(echo "$v" | cut -d. -f2); patch=$(echo "$v" | cut -d. -f3)
  $SUDO mkdir -p "$src"
  start=$SECONDS
  if [ "$(cat "$src/resolved" 2>/dev/null)" != "$v" ]; then
    log "kubernetes $v: wrapper module in $src"
    printf 'module gpucluster.invalid/k8s-build\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\n' "$GO_MIN" "$v" >"$src/go.mod"
    rm -f "$src/go.sum"
    kmod=$(cd "$src" && "$GO" mod download -json "k8s.io/kubernetes@$v" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
    [ -f "$kmod" ] || die "k8s.io/kubernetes@$v: no go.mod downloaded"
    local staging
    staging=$(sed -nE 's#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+)[[:space:]]+=>[[:space:]]+\./staging/.*#\1#p' "$kmod")
    [ -n "$staging" ] || die "k8s.io/kubernetes@$v: no staging replace lines in its go.mod"
    for b in $staging; do echo "replace $b => $b v0.$minor.$patch" >>"$src/go.mod"; done
    log "kubernetes $v: $(echo "$staging" | wc -l) staging modules replaced by v0.$minor.$patch; resolving"
    local cmds=()
    for b in "${K8S_BINS[@]}"; do cmds+=("k8s.io/kubernetes/cmd/$b@$v"); done
    (cd "$src" && "$GO" get "${cmds[@]}" >"$src/get.log" 2>&1) || { tail -20 "$src/get.log" >&2; die "kubernetes $v: go get failed"; }
    echo "$v" >"$src/resolved"
    log "kubernetes $v: modules resolved in $((SECONDS - start)) s"
  fi
  ld="-s -w"
  local kv
  for kv in "gitVersion=$v" gitMajor=1 "gitMinor=$minor" gitTreeState=clean \
            "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
    ld="$ld -X k8s.io/component-base/version.$kv -X k8s.io/client-go/pkg/version.$kv"
  done
  for b in "$@"; do  # one at a time: linking kube-apiserver alone takes ~2 GB
    local t=$SECONDS out
    out=$(mktemp -d)
    log "kubernetes $v: go build $b"
    (cd "$src" && nice -n 10 "$GO" build -trimpath -ldflags "$ld" -o "$out/$b" "k8s.io/kubernetes/cmd/$b") \
      || { rm -rf "$out"; die "kubernetes $v: building $b failed"; }
    install_bin "$out/$b" "$dir/bin/$b" "k8s $v"
    rm -rf "$out"
    log "kubernetes $v: $b built in $((SECONDS - t)) s"
  done
}

# etcd's server module has replace lines of its own (its sibling modules), so it is not `go install`able;
# a three-line main package that calls etcdmain.Main, in a wrapper module, builds the same server.
build_etcd() {
  local dir="$CACHE/etcd-$ETCD_VERSION" t=$SECONDS out
  $SUDO mkdir -p "$dir/src"
  log "etcd $ETCD_VERSION: wrapper module in $dir/src"
  printf 'module gpucluster.invalid/etcd-build\n\ngo %s\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
    "$GO_MIN" "$ETCD_VERSION" >"$dir/src/go.mod"
  cat >"$dir/src/main.go" <<'GO'
// Command etcd: the etcd server, built from the go.etcd.io/etcd/server/v3 module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  rm -f "$dir/src/go.sum"
  (cd "$dir/src" && "$GO" get "go.etcd.io/etcd/server/v3/etcdmain@$ETCD_VERSION" >"$dir/src/get.log" 2>&1) \
    || { tail -20 "$dir/src/get.log" >&2; die "etcd $ETCD_VERSION: resolving modules failed"; }
  out=$(mktemp -d)
  (cd "$dir/src" && nice -n 10 "$GO" build -trimpath -ldflags "-s -w" -o "$out/etcd" .) \
    || { rm -rf "$out"; die "etcd $ETCD_VERSION: build failed"; }
  install_bin "$out/etcd" "$(etcd_bin)" "etcd $ETCD_VERSION"
  rm -rf "$out"
  log "etcd $ETCD_VERSION built in $((SECONDS - t)) s"
}

# helm's module has no replace lines, so `go install module@version` builds it; the version is stamped as helm's
# Makefile does (internal/version), the client-go version helm reports comes from the module's build info.
build_helm() {
  local t=$SECONDS out p=helm.sh/helm/v4/internal/version
  out=$(mktemp -d)
  log "helm $HELM_VERSION: go install helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  GOBIN=$out nice -n 10 "$GO" install -trimpath \
    -ldflags "-s -w -X $p.version=$HELM_VERSION -X $p.metadata= -X $p.gitTreeState=clean" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" || { rm -rf "$out"; die "helm $HELM_VERSION: build failed"; }
  install_bin "$out/helm" "$(helm_bin)" "helm $HELM_VERSION"
  rm -rf "$out"
  log "helm $HELM_VERSION built in $((SECONDS - t)) s"
}

build_all() {
  local todo what bins v
  todo=$(missing_bins)
  if [ -n "$todo" ]; then
    go_env
    log "Go $("$GO" env GOVERSION), GOTOOLCHAIN=local; to build: $(echo "$todo" | awk '{print $1 "/" $2}' | tr '\n' ' ')"
    for v in "${K8S_VERSIONS[@]}"; do
      bins=$(echo "$todo" | awk -v w="k8s-$v" '$1 == w {print $2}' | tr '\n' ' ')
      # shellcheck disable=SC2086
      [ -z "$bins" ] || build_k8s "$v" $bins
    done
    what=$(echo "$todo" | awk '{print $1}')
    grep -qx "etcd-$ETCD_VERSION" <<<"$what" && build_etcd
    grep -qx "helm-$HELM_VERSION" <<<"$what" && build_helm
  fi
  for v in "${K8S_VERSIONS[@]}"; do
    log "$(k8s_dir "$v")/bin/kube-apiserver --version: $("$(k8s_dir "$v")/bin/kube-apiserver" --version)"
  done
  log "$(etcd_bin) --version: $("$(etcd_bin)" --version | head -1)"
  log "$(helm_bin) version: $("$(helm_bin)" version --short)"
}

lock() {
  need_root
  $SUDO mkdir -p "$(dirname "$LOCK_FILE")" "$CACHE"
  [ -n "$SUDO" ] && $SUDO touch "$LOCK_FILE" && $SUDO chmod 666 "$LOCK_FILE"
  exec 9>>"$LOCK_FILE"
  if ! flock -n 9; then log "another install holds $LOCK_FILE; waiting"; flock 9; fi
}

cmd_install() {
  local t0=$SECONDS
  lock
  install_pkgs
  build_all
  log "done in $((SECONDS - t0)) s"
}

cmd_check() {
  local mp mb
  mp=$(missing_pkgs | tr '\n' ' '); mb=$(missing_bins | awk '{print $1 "/" $2}' | tr '\n' ' ')
  if [ -z "${mp// /}" ] && [ -z "${mb// /}" ]; then echo "ok: all test dependencies installed ($CACHE)"; return 0; fi
  [ -n "${mp// /}" ] && echo "missing apt packages: $mp"
  [ -n "${mb// /}" ] && echo "missing binaries in $CACHE: $mb"
  echo "run: sudo scripts/test-deps.sh install"
  return 1
}

case "${1:-}" in
  install) cmd_install ;;
  packages) lock; install_pkgs ;;
  check) cmd_check ;;
  bindir) echo "$(k8s_dir "${2:-${K8S_VERSIONS[0]}}")/bin" ;;
  path)
    case "${2:-}" in
      etcd) etcd_bin ;;
      helm) helm_bin ;;
      kube-apiserver|kube-scheduler|kube-controller-manager|kubectl) echo "$(k8s_dir "${3:-${K8S_VERSIONS[0]}}")/bin/$2" ;;
      *) die "path: expected etcd, helm, kube-apiserver, kube-scheduler, kube-controller-manager or kubectl" ;;
    esac ;;
  versions) printf '%s\n' "${K8S_VERSIONS[@]}" ;;
  *) sed -n '2,18p' "$0" >&2; exit 2 ;;
esac
