#!/usr/bin/env bash
# Build gpucluster's image from Containerfile, then run `gpucluster --help` and `gpucluster k8s extender --help`
# in it (as uid 65532, read-only root file system, no network).
#
#   scripts/build-image.sh [--base registry|debian] [--tag IMAGE] [--rebuild] [--no-check] [-- ARGS...]
#
#   --base registry  FROM the Containerfile's default (python:3.11.7-slim-bookworm from a registry)
#   --base debian    (default) FROM a base made here from Debian's packages: mmdebstrap bookworm, variant
#                    essential, plus python3, python3-venv and libstdc++6 (numpy's wheels need it), imported
#                    with `podman import`; the root file system is cached in $CACHE/image/
#   --tag IMAGE      default localhost/gpucluster:<version>-<source hash>
#   --rebuild        build even when an image of the same source hash exists
#   -- ARGS...       then run `gpucluster ARGS` in the image (same sandbox) and print its output, not the name
#
# Steps: pip wheel the package and its dependencies into dist/wheels (from the package index or pip's
# cache; the image build itself needs no network), make or reuse the base, `podman build`, check.
# Cache: ${GPUCLUSTER_CACHE:-/var/cache/gpucluster}/image (outside the repository). Prints the image name last.
#
# Sandboxes: where cgroups are in hybrid mode (crun refuses: "cgroups in hybrid mode not supported") the
# script runs podman with `--runtime runc`, and where the process lacks CAP_SYS_RESOURCE (podman's default
# rlimits fail: "setrlimit `RLIMIT_NOFILE`: Operation not permitted") it passes the caller's own limits as
# --ulimit. Extra podman flags for build and run: PODMAN_OPTS (global), PODMAN_RUN_OPTS (build and run).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE="${GPUCLUSTER_CACHE:-/var/cache/gpucluster}/image"
SUITE=bookworm
BASE_PKGS=python3,python3-venv,libstdc++6
PY_MINOR=3.11   # bookworm's python3 and the registry base's; the wheels are built for it
BASE_KIND=debian TAG="" REBUILD=0 CHECK=1

log() { printf '[build-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build-image] ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --base) BASE_KIND=${2:?--base needs registry or debian}; shift 2 ;;
    --tag) TAG=${2:?--tag needs an image name}; shift 2 ;;
    --rebuild) REBUILD=1; shift ;;
    --no-check) CHECK=0; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
case "$BASE_KIND" in registry|debian) ;; *) die "--base: registry or debian, not $BASE_KIND" ;; esac
command -v podman >/dev/null || die "podman not found (Debian: apt-get install podman runc)"

# shellcheck disable=SC2206
PODMAN=(podman ${PODMAN_OPTS:-})
# shellcheck disable=SC2206
RUN_OPTS=(${PODMAN_RUN_OPTS:-})
if [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null)" ] && command -v runc >/dev/null; then
  PODMAN+=(--runtime runc)   # hybrid cgroups with controllers on v2: crun refuses, runc copes
fi
cap_eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
if [ $(( 0x$cap_eff >> 24 & 1 )) = 0 ]; then   # no CAP_SYS_RESOURCE: keep limits at or below ours
  RUN_OPTS+=(--ulimit "nofile=$(ulimit -n):$(ulimit -n)" --ulimit "nproc=4096:4096")
fi

py=${PYTHON:-}
if [ -z "$py" ]; then
  for c in "$REPO/.venv/bin/python" "python$PY_MINOR" python3; do
    if command -v "$c" >/dev/null && [ "$("$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$PY_MINOR" ]; then
      py=$c; break
    fi
  done
fi
[ -n "$py" ] || die "no Python $PY_MINOR to build the wheels with (set PYTHON=...)"

# The source hash: what goes into the image (the package's files, its metadata, the recipe, the base).
source_hash() {
  (cd "$REPO" && find src pyproject.toml README.md Containerfile -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
     -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; echo "$BASE_KIND $SUITE $BASE_PKGS") | sha256sum | cut -c1-12
}
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$REPO/pyproject.toml" | head -1)
hash=$(source_hash)
TAG=${TAG:-localhost/gpucluster:$version-$hash}
if [ "$REBUILD" = 0 ] && "${PODMAN[@]}" image exists "$TAG" \
   && [ "$("${PODMAN[@]}" image inspect --format '{{index .Labels "io.gpucluster.source"}}' "$TAG")" = "$hash" ]; then
  log "image $TAG is current (source $hash)"
else
  t0=$SECONDS
  log "wheels: $py -m pip wheel --wheel-dir dist/wheels/deps . (package and dependencies)"
  rm -rf "$REPO/dist/wheels"
  mkdir -p "$REPO/dist"
  (cd "$REPO" && "$py" -m pip wheel --quiet --disable-pip-version-check --wheel-dir dist/wheels/deps . \
     >"$REPO/dist/pip-wheel.log" 2>&1) || { tail -30 "$REPO/dist/pip-wheel.log" >&2; die "pip wheel failed"; }
  mv "$REPO"/dist/wheels/deps/gpucluster-*.whl "$REPO/dist/wheels/"   # the package: a layer of its own
  base_arg=()
  if [ "$BASE_KIND" = debian ]; then
    command -v mmdebstrap >/dev/null || die "mmdebstrap not found (Debian: apt-get install mmdebstrap)"
    mkdir -p "$CACHE"
    key=$(echo "$SUITE $BASE_PKGS essential nodoc" | sha256sum | cut -c1-12)
    rootfs="$CACHE/base-$SUITE-$key.tar"
    if [ ! -s "$rootfs" ]; then
      sources=/etc/apt/sources.list.d/debian.sources
      [ -f "$sources" ] || sources=/etc/apt/sources.list   # the machine's own Debian mirror, as apt uses it
      log "base: mmdebstrap $SUITE (essential + $BASE_PKGS) -> $rootfs (about 1-2 min)"
      mmdebstrap --quiet --format=tar --variant=essential --include="$BASE_PKGS" \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
        "$SUITE" "$rootfs.tmp" "$sources" >&2 || { rm -f "$rootfs.tmp"; die "mmdebstrap failed"; }
      mv "$rootfs.tmp" "$rootfs"
    fi
    base="localhost/gpucluster-base:$SUITE-$key"
    if ! "${PODMAN[@]}" image exists "$base"; then
      log "base: podman import $rootfs $base"
      "${PODMAN[@]}" import --quiet --change 'CMD ["/bin/sh"]' "$rootfs" "$base" >/dev/null
    fi
    base_arg=(--build-arg "BASE=$base")
  fi
  log "podman build -t $TAG ${base_arg[*]}"
  "${PODMAN[@]}" build --quiet "${RUN_OPTS[@]}" --network none "${base_arg[@]}" --label "io.gpucluster.source=$hash" \
    -t "$TAG" -f "$REPO/Containerfile" "$REPO" >&2 || die "podman build failed"
  log "built $TAG in $((SECONDS - t0)) s"
  if [ "$TAG" = "localhost/gpucluster:$version-$hash" ]; then  # drop this script's images of older sources
    "${PODMAN[@]}" images --format '{{.Repository}}:{{.Tag}}' "localhost/gpucluster" \
      | grep -E "^localhost/gpucluster:$version-[0-9a-f]{12}\$" | grep -vx "$TAG" \
      | xargs -r "${PODMAN[@]}" rmi >/dev/null 2>&1 || true
  fi
fi

run_in_image() {  # as the chart runs it: its uid, read-only root, a writable /tmp; no network here
  "${PODMAN[@]}" run --rm "${RUN_OPTS[@]}" --network none --read-only --tmpfs /tmp --user 65532:65532 "$TAG" "$@"
}

if [ "$CHECK" = 1 ]; then
  for args in "--help" "k8s extender --help"; do
    log "check: podman run $TAG $args"
    # shellcheck disable=SC2086
    out=$(run_in_image $args 2>&1) || { printf '%s\n' "$out" >&2; die "gpucluster $args failed in $TAG"; }
    grep -q "Usage:" <<<"$out" || { printf '%s\n' "$out" >&2; die "gpucluster $args printed no usage"; }
  done
fi
if [ $# -gt 0 ]; then
  log "podman run $TAG $*"
  run_in_image "$@"
else
  echo "$TAG"
fi
