#!/usr/bin/env bash
# Install the real services the integration tests need, on Debian 12 (bookworm), as root.
#
#   scripts/test-deps.sh install   apt packages + kube-apiserver/-scheduler/-controller-manager v1.20.2
#                                  built from Debian's `kubernetes` source package (cached, built once;
#                                  scripts/k8s-patches/BINARY--*.patch applied, a binary whose patches
#                                  changed is rebuilt alone),
#                                  and the chart renderer's Go sources (scripts/render-chart.sh)
#   scripts/test-deps.sh check     exit 0 when everything is installed, 1 otherwise (prints what is missing)
#   scripts/test-deps.sh bindir    print the directory holding the cached Kubernetes binaries
#
# Idempotent: a second run only checks and returns in about a second. Runs are serialised with a lock.
# Cache: ${GPUCLUSTER_CACHE:-/var/cache/gpucluster}/k8s-v1.20.2/bin (outside the repository).
set -euo pipefail

K8S_SRC_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
K8S_VERSION="v1.20.2"
CACHE="${GPUCLUSTER_CACHE:-/var/cache/gpucluster}"
BIN_DIR="$CACHE/k8s-$K8S_VERSION/bin"
K8S_BINS=(kube-apiserver kube-scheduler kube-controller-manager)
PATCH_DIR="$(cd "$(dirname "$0")" && pwd)/k8s-patches"
APT_PKGS=(etcd-server golang-go rsync openssl curl dpkg-dev prometheus chromium chromium-driver
          golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev mmdebstrap podman runc)
# mmdebstrap, podman, runc: scripts/build-image.sh (the image test) makes a Debian base and builds and runs
# the image; runc because crun refuses hybrid cgroups.
# golang-github-masterminds-sprig-dev, golang-k8s-sigs-yaml-dev: Go sources of the chart renderer that
# scripts/render-chart.sh builds when helm is missing. kubectl (for `kubectl kustomize`): Debian's
# kubernetes-client, installed only when no kubectl is on PATH (another package may own /usr/bin/kubectl).
command -v kubectl >/dev/null 2>&1 || APT_PKGS+=(kubernetes-client)
LOCK_FILE="${GPUCLUSTER_DEPS_LOCK:-/var/lock/gpucluster-test-deps.lock}"

log() { printf '[test-deps %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[test-deps] ERROR: %s\n' "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else die "run as root (or install sudo)"; fi
fi

missing_pkgs() {
  local p
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

# A binary's patches (PATCH_DIR/BINARY--*.patch, applied to the source in name order) as one hash; the build
# writes it to BIN_DIR/BINARY.patches, so a binary built before its patches changed counts as missing.
patch_hash() {
  local f out=""
  for f in "$PATCH_DIR/$1"--*.patch; do [ -f "$f" ] && out="$out$(basename "$f") $(sha256sum <"$f" | cut -c1-16)
"; done
  printf '%s' "$out"
}

missing_bins() {
  local b
  for b in "${K8S_BINS[@]}"; do
    if [ ! -x "$BIN_DIR/$b" ] || [ "$(cat "$BIN_DIR/$b.patches" 2>/dev/null)" != "$(patch_hash "$b")" ]; then echo "$b"; fi
  done
}

deb_src_enabled() {
  grep -Eqs '^(Types:.*deb-src|deb-src[[:space:]])' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list
}

# Enable source packages without naming a mirror: derive them from the machine's own configuration.
enable_deb_src() {
  if deb_src_enabled; then log "deb-src already enabled"; return; fi
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    log "enabling deb-src: /etc/apt/sources.list.d/debian.sources -> debian-src.sources (Types: deb-src)"
    sed -E 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
      | $SUDO tee /etc/apt/sources.list.d/debian-src.sources >/dev/null
  elif grep -Eqs '^deb[[:space:]]' /etc/apt/sources.list; then
    log "enabling deb-src: /etc/apt/sources.list deb lines -> sources.list.d/debian-src.list"
    sed -nE 's/^deb([[:space:]])/deb-src\1/p' /etc/apt/sources.list \
      | $SUDO tee /etc/apt/sources.list.d/debian-src.list >/dev/null
  else
    die "no Debian apt source found (/etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list)"
  fi
}

# The prometheus package starts a system service on install; tests start their own instances.
stop_system_prometheus() {
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
  local need_src=0
  [ -n "$(missing_bins)" ] && need_src=1
  if [ -z "$missing" ] && { [ "$need_src" = 0 ] || deb_src_enabled; } && [ "${FORCE_APT_UPDATE:-0}" != 1 ]; then
    log "apt packages already installed: ${APT_PKGS[*]}"
    if [ "$need_src" = 0 ]; then stop_system_prometheus; return; fi
  fi
  [ "$need_src" = 1 ] && enable_deb_src
  log "apt-get update"
  $SUDO apt-get update -q
  if [ -n "$missing" ]; then
    log "apt-get install --no-install-recommends $missing"
    # Keep package maintainer scripts from starting services (prometheus) while installing.
    local policy_created=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
      $SUDO chmod 755 /usr/sbin/policy-rc.d
      policy_created=1
    fi
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing || {
      [ "$policy_created" = 1 ] && $SUDO rm -f /usr/sbin/policy-rc.d; die "apt-get install failed"; }
    [ "$policy_created" = 1 ] && $SUDO rm -f /usr/sbin/policy-rc.d
  fi
  stop_system_prometheus
}

build_k8s() {
  local todo
  todo=$(missing_bins | tr '\n' ' ')
  if [ -z "$todo" ]; then log "kubernetes $K8S_VERSION binaries cached in $BIN_DIR"; return; fi
  log "building ${todo% } $K8S_VERSION (about 5 min on 2 cores for all three)"
  $SUDO mkdir -p "$CACHE"
  local work
  work=$($SUDO mktemp -d "$CACHE/build.XXXXXX")
  [ -n "$SUDO" ] && $SUDO chown "$(id -u):$(id -g)" "$work"
  # let apt's sandbox user write the download (avoids the "unsandboxed as root" warning)
  [ -z "$SUDO" ] && id _apt >/dev/null 2>&1 && chown _apt "$work"
  # shellcheck disable=SC2064
  trap "log 'removing build tree $work'; rm -rf '$work'" EXIT
  cd "$work"
  log "apt-get source --download-only kubernetes=$K8S_SRC_VERSION (into $work)"
  apt-get source -q --download-only "kubernetes=$K8S_SRC_VERSION"
  local orig
  orig=$(ls kubernetes_*.orig.tar.* | head -1)
  log "unpacking $orig"
  tar xf "$orig"
  local src
  src=$(find . -maxdepth 1 -type d -name 'kubernetes*' | head -1)
  [ -n "$src" ] || die "no kubernetes source directory in $orig"
  cd "$src"
  local b f what=""
  for b in $todo; do
    what="$what cmd/$b"
    for f in "$PATCH_DIR/$b"--*.patch; do
      [ -f "$f" ] || continue
      log "patching the source for $b: $(basename "$f")"
      patch -p1 --forward --quiet <"$f" || die "patch $f does not apply to kubernetes $K8S_SRC_VERSION"
    done
  done
  local start=$SECONDS
  log "make WHAT=\"${what# }\" (in $work/$src)"
  HOME=$PWD GOFLAGS= GO111MODULE= CGO_ENABLED=0 KUBE_GIT_VERSION="$K8S_VERSION" KUBE_GIT_TREE_STATE=clean \
    make WHAT="${what# }" >"$work/build.log" 2>&1 || {
      tail -40 "$work/build.log" >&2; die "kubernetes build failed"; }
  log "build finished in $((SECONDS - start)) s"
  $SUDO mkdir -p "$BIN_DIR"
  for b in $todo; do  # each replaced by a rename: running copies keep their file
    $SUDO install -m 0755 "_output/bin/$b" "$BIN_DIR/.$b.new"
    $SUDO mv -f "$BIN_DIR/.$b.new" "$BIN_DIR/$b"
    patch_hash "$b" | $SUDO tee "$BIN_DIR/$b.patches" >/dev/null
    "$BIN_DIR/$b" --version
  done
  cd /
  log "removing build tree $work"
  rm -rf "$work"
  trap - EXIT
}

cmd_install() {
  local t0=$SECONDS
  $SUDO mkdir -p "$(dirname "$LOCK_FILE")"
  [ -n "$SUDO" ] && $SUDO touch "$LOCK_FILE" && $SUDO chmod 666 "$LOCK_FILE"
  exec 9>>"$LOCK_FILE"
  if ! flock -n 9; then log "another install holds $LOCK_FILE; waiting"; flock 9; fi
  install_pkgs
  build_k8s
  log "done in $((SECONDS - t0)) s; kubernetes binaries: $BIN_DIR"
}

cmd_check() {
  local mp mb
  mp=$(missing_pkgs | tr '\n' ' '); mb=$(missing_bins | tr '\n' ' ')
  if [ -z "$mp" ] && [ -z "$mb" ]; then echo "ok: all test dependencies installed ($BIN_DIR)"; return 0; fi
  [ -n "$mp" ] && echo "missing apt packages: $mp"
  [ -n "$mb" ] && echo "missing kubernetes binaries in $BIN_DIR: $mb"
  echo "run: sudo scripts/test-deps.sh install"
  return 1
}

case "${1:-}" in
  install) cmd_install ;;
  check) cmd_check ;;
  bindir) echo "$BIN_DIR" ;;
  *) echo "usage: $0 install|check|bindir" >&2; exit 2 ;;
esac
