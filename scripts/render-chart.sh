#!/usr/bin/env bash
# Render a Helm chart to Kubernetes objects (YAML on stdout).
#
#   scripts/render-chart.sh CHART [--kube-version X.Y[.Z]] [--set k=v ...] [--set-string k=v ...]
#                           [-f values.yaml ...] [--namespace NS] [--name RELEASE]
#
# With `helm` on PATH: `helm template` (RENDER_CHART_ENGINE=helm forces it, =go forces the fallback).
# Otherwise: scripts/render-chart/main.go, a small renderer on Go's text/template + sprig (what Helm uses)
# with Helm's include/tpl/required/toYaml/.Capabilities, built offline from Debian's golang-go and
# golang-github-masterminds-sprig-dev (+ golang-k8s-sigs-yaml-dev), cached outside the repository in
# ${GPUCLUSTER_CACHE:-/var/cache/gpucluster}/render-chart/<source hash>/. scripts/test-deps.sh installs them.
# The engine used is printed on stderr ("render-chart: engine helm|go"). docs/deploy.md says what the Go
# renderer covers.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/render-chart/main.go"
CACHE="${GPUCLUSTER_CACHE:-/var/cache/gpucluster}"
GOCODE="${GOCODE:-/usr/share/gocode/src}"

die() { printf 'render-chart: %s\n' "$*" >&2; exit 2; }

[ $# -ge 1 ] || die "usage: render-chart.sh CHART [--kube-version X] [--set k=v ...]"
engine="${RENDER_CHART_ENGINE:-}"
if [ -z "$engine" ]; then
  if command -v helm >/dev/null 2>&1; then engine=helm; else engine=go; fi
fi

if [ "$engine" = helm ]; then
  chart="$1"; shift
  args=() name=gpucluster
  while [ $# -gt 0 ]; do
    case "$1" in
      --name|--release-name) name="$2"; shift 2 ;;
      --name=*|--release-name=*) name="${1#*=}"; shift ;;
      *) args+=("$1"); shift ;;
    esac
  done
  echo "render-chart: engine helm" >&2
  exec helm template "$name" "$chart" "${args[@]}"
fi

[ "$engine" = go ] || die "RENDER_CHART_ENGINE=$engine: expected helm or go"
command -v go >/dev/null 2>&1 || die "neither helm nor go found: run scripts/test-deps.sh install (golang-go)"
[ -d "$GOCODE/github.com/Masterminds/sprig" ] && [ -d "$GOCODE/sigs.k8s.io/yaml" ] \
  || die "Go sources missing in $GOCODE: apt-get install golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev (scripts/test-deps.sh install)"

hash=$(cat "$SRC" | sha256sum | cut -c1-16)
dir="$CACHE/render-chart/$hash"
bin="$dir/render-chart"
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  work=$(mktemp -d "$dir/build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  # A module with a vendor/ tree of links to Debian's Go sources (-mod=vendor: nothing is downloaded).
  mod="$work/mod"
  mkdir -p "$mod/vendor"
  cp "$SRC" "$mod/main.go"
  modules=(
    "github.com/Masterminds/sprig/v3=github.com/Masterminds/sprig"
    "github.com/Masterminds/semver/v3=github.com/Masterminds/semver"
    "github.com/Masterminds/goutils=github.com/Masterminds/goutils"
    "github.com/huandu/xstrings=github.com/huandu/xstrings"
    "github.com/google/uuid=github.com/google/uuid"
    "github.com/imdario/mergo=github.com/imdario/mergo"
    "github.com/shopspring/decimal=github.com/shopspring/decimal"
    "github.com/mitchellh/copystructure=github.com/mitchellh/copystructure"
    "github.com/mitchellh/reflectwalk=github.com/mitchellh/reflectwalk"
    "github.com/spf13/cast=github.com/spf13/cast"
    "golang.org/x/crypto=golang.org/x/crypto"
    "sigs.k8s.io/yaml=sigs.k8s.io/yaml"
    "gopkg.in/yaml.v2=gopkg.in/yaml.v2"
  )
  { echo "module render-chart"; echo; echo "go 1.19"; echo; echo "require ("; } > "$mod/go.mod"
  : > "$mod/vendor/modules.txt"
  for entry in "${modules[@]}"; do
    path=${entry%%=*} src="$GOCODE/${entry#*=}"
    [ -d "$src" ] || die "missing $src (Debian Go package): run scripts/test-deps.sh install"
    case "$path" in
      */v[0-9]*) ver="v${path##*/v}.0.0" ;;
      *.v[0-9]*) ver="v${path##*.v}.0.0" ;;
      *) ver="v0.0.0" ;;
    esac
    echo "	$path $ver" >> "$mod/go.mod"
    mkdir -p "$mod/vendor/$(dirname "$path")"
    ln -s "$src" "$mod/vendor/$path"
    { echo "# $path $ver"; echo "## explicit"
      (cd "$src" && find -L . -name '*.go' -not -name '*_test.go' -not -path '*/testdata/*' -printf '%h\n' \
         | sort -u | sed -e "s#^\.\$#$path#" -e "s#^\./#$path/#")
    } >> "$mod/vendor/modules.txt"
  done
  echo ")" >> "$mod/go.mod"
  echo "render-chart: building the Go renderer into $bin (once)" >&2
  (cd "$mod" && GO111MODULE=on GOFLAGS=-mod=vendor GOPROXY=off GOSUMDB=off GOCACHE="$CACHE/render-chart/gocache" \
     CGO_ENABLED=0 go build -o "$work/render-chart" .) >&2 || die "building $SRC failed"
  mv "$work/render-chart" "$bin"
fi
echo "render-chart: engine go ($bin)" >&2
name=gpucluster
args=()
chart="$1"; shift
has_name=0
for a in "$@"; do case "$a" in --name|--name=*|--release-name|--release-name=*) has_name=1 ;; esac; done
[ "$has_name" = 1 ] || args+=(--name "$name")
exec "$bin" "$chart" "${args[@]}" "$@"
